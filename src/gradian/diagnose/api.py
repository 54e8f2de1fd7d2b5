"""Python API: ``gradian.diagnose(run=..., train=..., ...) -> list[Finding]``."""

from __future__ import annotations

from typing import Any

from gradian.diagnose.context import DiagnoseContext, build_context
from gradian.diagnose.engine import run_rules, select_rules
from gradian.diagnose.settings import DiagnoseSettings, apply_overrides, load_settings
from gradian.diagnose.types import Finding, Note
from gradian.options import DiagnoseOptions, RunInputs
from gradian.options.base import split_kwargs


def diagnose_context(
    ctx: DiagnoseContext, *, select: list[str] | None = None, ignore: list[str] | None = None
) -> tuple[list[Finding], list[Note]]:
    """Run the selected rules over an already built context."""
    return run_rules(ctx, select_rules(select or [], ignore or []))


def diagnose_full(
    inputs: RunInputs | None = None,
    options: DiagnoseOptions | None = None,
    *,
    thresholds: dict[str, dict[str, Any]] | None = None,
    settings: DiagnoseSettings | None = None,
    train_limit: int | None = None,
    loaded: Any = None,
    **kwargs: Any,
) -> tuple[list[Finding], list[Note], DiagnoseContext]:
    """Run the checks; ``loaded`` is a :class:`gradian.run.loaded.LoadedRun` already read (see build_context).
    ``kwargs``: any :class:`RunInputs` path (``train=...``) or :class:`DiagnoseOptions` field (``select=[...]``,
    ``ignore``, ``overrides``), over ``inputs`` / ``options``."""
    ins, opts = split_kwargs("diagnose", kwargs, (RunInputs, inputs), (DiagnoseOptions, options))
    settings = settings or load_settings()
    apply_overrides(settings, list(opts.overrides))
    th = {k: dict(v) for k, v in settings.thresholds.items()}
    for k, v in (thresholds or {}).items():
        th.setdefault(k, {}).update(v)
    select = list(opts.select) if opts.select is not None else settings.select
    rules = select_rules(select, [*settings.ignore, *opts.ignore])
    ctx = build_context(**ins.as_kwargs("run", "train", "eval", "config", "logs", "adapter", "base", "tokenizer"),
                        thresholds=th, train_limit=train_limit, loaded=loaded)  # fmt: skip
    findings, notes = run_rules(ctx, rules)
    return findings, notes, ctx


def diagnose(**kwargs: Any) -> list[Finding]:
    """Check the data, config and trainer logs of a LoRA fine-tune; returns the findings, most severe first.

    Keyword arguments: run, train, eval, config, logs, adapter, base, tokenizer (paths, :class:`RunInputs`),
    select / ignore (rule codes, names or prefixes), overrides (["rule.threshold=value"]) (:class:`DiagnoseOptions`),
    thresholds ({rule: {threshold: value}}).
    """
    return diagnose_full(**kwargs)[0]
