"""The normalized inputs every rule reads (`DiagnoseContext`), and `build_context`, which fills one from files
with the shared loaders (gradian.run for the run, config and logs; gradian.data for rows, tokenizer, formatting)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradian.data.types import Example, FormatSettings, FormattedExample
from gradian.diagnose.textstats import cache
from gradian.errors import GradianError
from gradian.options.train import TRL_MAX_LENGTH
from gradian.run.types import RunArtifacts, TrainerLogs, TrainingSetup
from gradian.run.versions import VersionWindow, WindowCheck, check_window

# Max length a framework uses when the config sets none.
FRAMEWORK_DEFAULT_MAX_LENGTH = {"trl": TRL_MAX_LENGTH, "transformers": None, "axolotl": 512, "llamafactory": 2048}


@dataclass
class DiagnoseContext:
    """Everything the rules look at. Every field may be empty: rules that need a missing input are skipped with a
    note. Unit tests build these directly from the shared types."""

    train: list[Example] = field(default_factory=list)
    eval: list[Example] = field(default_factory=list)
    problems: list[Any] = field(default_factory=list)  # unreadable rows from load_examples_with_problems
    eval_problems: list[Any] = field(default_factory=list)  # the same for the eval file
    formatted: list[FormattedExample] | None = None  # train rows tokenized exactly as the trainer would
    formatted_note: str | None = None  # why `formatted` is None
    format_error: str | None = None  # the rows could not be formatted with this tokenizer (no chat template, ...)
    format_settings: FormatSettings | None = None
    tokenizer: Any = None
    setup: TrainingSetup = field(default_factory=TrainingSetup)
    setup_known: bool = False  # a config was read (else config rules are skipped)
    logs: TrainerLogs = field(default_factory=TrainerLogs)
    artifacts: RunArtifacts = field(default_factory=RunArtifacts)
    base_config: dict[str, Any] = field(default_factory=dict)  # the base model's config.json, when local
    generation_config: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)  # rule name -> threshold -> value
    train_file: str | None = None
    train_limited: bool = False  # only the first rows of the training file were read (build_context's train_limit)
    eval_file: str | None = None
    cache: dict[str, Any] = field(default_factory=dict)  # per-row measures several rules share (textstats.cache)

    # ---- helpers shared by rules -------------------------------------------------------------------------------
    def src(self, key: str) -> str | None:
        return self.setup.sources.get(key)

    def is_adapter_run(self) -> bool:
        s = self.setup
        if s.lora_r is not None or self.artifacts.adapter_config:
            return True
        raw = s.raw
        return (
            str(raw.get("adapter", "")).lower() in ("lora", "qlora")
            or str(raw.get("finetuning_type", "")).lower() in ("lora", "qlora")
            or bool(raw.get("use_peft") or raw.get("peft_config"))
        )

    def framework(self) -> str:
        return (self.setup.framework or "").lower()

    def preference_rows(self) -> tuple[str | None, list[Example]]:
        """``(kind, rows)`` when most train rows are preference data rather than SFT rows: ``"pairs"`` (chosen /
        rejected replies: DPO, ORPO) or ``"kto"`` (a reply with a true/false ``label``); else ``(None, [])``."""

        def compute() -> tuple[str | None, list[Example]]:
            raws = [(e, e.raw) for e in self.train if isinstance(e.raw, dict)]
            pairs = [e for e, r in raws if "chosen" in r and "rejected" in r]
            kto = [e for e, r in raws if isinstance(r.get("label"), bool)]
            return next(((k, rows) for k, rows in (("pairs", pairs), ("kto", kto)) if 2 * len(rows) > len(self.train)),
                        (None, []))  # fmt: skip

        return cache(self, "preference_rows", compute)

    def version_window(self, window: VersionWindow) -> WindowCheck:
        """The run's recorded version against ``window``; unknown (``inside`` None) when the run recorded none."""
        return check_window(self.setup.versions, self.setup.sources, window, self.setup.version_ranges)

    def effective_max_length(self) -> tuple[int | None, str]:
        if self.format_settings is not None and self.format_settings.max_length is not None:
            src = self.format_settings.sources.get("max_length") or self.src("max_length") or "format settings"
            return self.format_settings.max_length, src
        if self.setup.max_length is not None:
            return self.setup.max_length, self.src("max_length") or "config"
        fw = self.framework()
        if fw in FRAMEWORK_DEFAULT_MAX_LENGTH and FRAMEWORK_DEFAULT_MAX_LENGTH[fw]:
            return FRAMEWORK_DEFAULT_MAX_LENGTH[fw], f"{fw} default"
        return None, "unset"

    def masking(self) -> str | None:
        if self.setup.masking:
            return self.setup.masking
        if self.format_settings is not None and self.setup_known:
            return self.format_settings.mask
        return None

    def train_size(self) -> int | None:
        return len(self.train) if self.train else None

    def vocab_size(self) -> int | None:
        if self.tokenizer is not None:
            try:
                return len(self.tokenizer)
            except TypeError:
                pass
        v = self.base_config.get("vocab_size")
        return int(v) if v else None

    def base_params_estimate(self) -> int | None:
        """Rough parameter count of a decoder-only base from its config.json (None when unknown)."""
        c = self.base_config
        h, n_layers = c.get("hidden_size"), c.get("num_hidden_layers")
        if not h or not n_layers:
            return None
        ffn = c.get("intermediate_size") or 4 * h
        vocab = c.get("vocab_size") or 0
        return int(n_layers * (4 * h * h + 3 * h * ffn) + vocab * h)

    def chat_template(self) -> str:
        t = getattr(self.tokenizer, "chat_template", None) if self.tokenizer is not None else None
        if isinstance(t, dict):
            t = t.get("default") or next(iter(t.values()), "")
        return t or ""


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def build_context(
    *,
    run: str | Path | None = None,
    train: str | Path | None = None,
    eval: str | Path | None = None,
    config: str | Path | None = None,
    logs: str | Path | None = None,
    adapter: str | Path | None = None,
    base: str | None = None,
    tokenizer: str | Path | None = None,
    thresholds: dict[str, dict[str, Any]] | None = None,
    train_limit: int | None = None,
    loaded: Any = None,
) -> DiagnoseContext:
    """Read every input from files with the shared loaders; what cannot be found stays empty. ``train_limit``: read
    only the first that many training rows (``ctx.train_limited`` says whether the file had more). The run is read by
    :func:`gradian.run.loaded.load_run`, the loader ``attribute`` and ``tokens`` use, so all see the same rows;
    ``loaded`` is a run already read that way (without its rows, e.g. by ``attribute``): the paths are then not
    read again."""
    from gradian.data import load_examples_with_problems
    from gradian.run import load_logs
    from gradian.run.loaded import load_run

    if loaded is None:
        loaded = load_run(
            run=run, train=train, eval=eval, config=config, logs=logs, adapter=adapter, base=base, tokenizer=tokenizer,
            read_rows=False,
        )  # fmt: skip
    lr = loaded.load_rows(tokenizer, train_limit=train_limit, format_rows=False)  # D127: formatting may fail
    artifacts = lr.artifacts
    ctx = DiagnoseContext(artifacts=artifacts, thresholds=thresholds or {})
    ctx.setup = lr.setup
    ctx.setup_known = bool(ctx.setup.config_files or artifacts.config_files or artifacts.adapter_config)
    ctx.logs = load_logs(artifacts) if artifacts.log_file is not None else TrainerLogs()
    ctx.format_settings = lr.format_settings  # the trainer's formatting (EOS included), shared with attribute
    ctx.train, ctx.problems, ctx.train_limited = lr.train, lr.problems, lr.train_limited
    if artifacts.train_file is not None:
        ctx.train_file = str(artifacts.train_file)
    if artifacts.eval_file is not None:
        ctx.eval, ctx.eval_problems = load_examples_with_problems(artifacts.eval_file, prompt_only=True)
        ctx.eval_file = str(artifacts.eval_file)
    base_dir = Path(artifacts.base) if artifacts.base and Path(artifacts.base).is_dir() else None
    if base_dir is not None:
        ctx.base_config = _read_json(base_dir / "config.json")
        ctx.generation_config = _read_json(base_dir / "generation_config.json")
    ctx.tokenizer = lr.tokenizer
    if ctx.tokenizer is None:
        ctx.formatted_note = lr.formatted_note
    elif ctx.train:
        from gradian.data import format_examples

        _format_rows(ctx, format_examples)
    else:
        ctx.formatted_note = "no train rows to tokenize" if artifacts.train_file else "no training file (pass --train)"
    return ctx


def _format_rows(ctx: DiagnoseContext, format_examples: Any) -> None:
    """Tokenize the rows as the trainer would; a tokenizer that cannot format them (no chat template for chat rows,
    a template that raises) is a finding (D127), not a refusal: every check that needs no tokens still runs."""
    from gradian.data import chat_template_text

    if any(e.messages is not None for e in ctx.train) and chat_template_text(ctx.tokenizer) is None:
        ctx.format_error = "it has no chat template"
    else:
        try:
            ctx.formatted = format_examples(ctx.train, ctx.tokenizer, ctx.format_settings)
            return
        except GradianError as err:
            ctx.format_error = err.one_line().rstrip(".")
    ctx.formatted_note = f"the rows cannot be formatted with this tokenizer: {ctx.format_error} (see D127)"
