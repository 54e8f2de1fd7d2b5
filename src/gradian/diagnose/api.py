"""Python API: ``gradian.diagnose(run=..., train=..., ...) -> list[Finding]``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradian.diagnose.context import DiagnoseContext, build_context
from gradian.diagnose.engine import run_rules, select_rules
from gradian.diagnose.settings import DiagnoseSettings, apply_overrides, load_settings
from gradian.diagnose.types import Finding, Note


def diagnose_context(
    ctx: DiagnoseContext, *, select: list[str] | None = None, ignore: list[str] | None = None
) -> tuple[list[Finding], list[Note]]:
    """Run the selected rules over an already built context."""
    return run_rules(ctx, select_rules(select or [], ignore or []))


def diagnose_full(
    *,
    run: str | Path | None = None,
    train: str | Path | None = None,
    eval: str | Path | None = None,  # noqa: A002
    config: str | Path | None = None,
    logs: str | Path | None = None,
    adapter: str | Path | None = None,
    base: str | None = None,
    tokenizer: str | Path | None = None,
    select: list[str] | None = None,
    ignore: list[str] | None = None,
    thresholds: dict[str, dict[str, Any]] | None = None,
    settings: DiagnoseSettings | None = None,
    overrides: list[str] | None = None,
    train_limit: int | None = None,
    loaded: Any = None,
) -> tuple[list[Finding], list[Note], DiagnoseContext]:
    """Run the checks; ``loaded`` is a :class:`gradian.run.loaded.LoadedRun` already read (see build_context)."""
    settings = settings or load_settings()
    apply_overrides(settings, overrides or [])
    th = {k: dict(v) for k, v in settings.thresholds.items()}
    for k, v in (thresholds or {}).items():
        th.setdefault(k, {}).update(v)
    rules = select_rules(select if select is not None else settings.select, [*settings.ignore, *(ignore or [])])
    ctx = build_context(run=run, train=train, eval=eval, config=config, logs=logs, adapter=adapter, base=base,
                        tokenizer=tokenizer, thresholds=th, train_limit=train_limit, loaded=loaded)  # fmt: skip
    findings, notes = run_rules(ctx, rules)
    return findings, notes, ctx


def diagnose(**kwargs: Any) -> list[Finding]:
    """Check the data, config and trainer logs of a LoRA fine-tune; returns the findings, most severe first.

    Keyword arguments: run, train, eval, config, logs, adapter, base, tokenizer (paths), select / ignore (rule
    codes, names or prefixes), thresholds ({rule: {threshold: value}}), overrides (["rule.threshold=value"]).
    """
    return diagnose_full(**kwargs)[0]
