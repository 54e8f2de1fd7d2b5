"""What a run is made of: the paths `gradian attribute`, `diagnose` and the pipeline read (found from ``run`` unless
given)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from gradian.options.base import Options, option


@dataclass(frozen=True)
class RunInputs(Options):
    """The run folder and the files that override what is found in it."""

    name: ClassVar[str] = "input"

    run: str | Path | None = option(None, "Training output dir (adapter, configs, trainer_state.json).")
    base: str | None = option(None, "Base model dir or hub id (default: from adapter_config).")
    adapter: str | Path | None = option(None, "PEFT adapter dir (adapter_model.safetensors).")
    train: str | Path | None = option(None, "Training data file (JSONL/JSON/CSV/Parquet).")
    eval: str | Path | None = option(None, "Eval items (prompt/completion) to check for regressions.")
    tokenizer: str | Path | None = option(None, "Tokenizer dir (default: adapter, then base).")
    config: str | Path | None = option(
        None, "Training config (TRL/HF JSON, Axolotl/LLaMA-Factory YAML, or the README.md Axolotl writes)."
    )
    logs: str | Path | None = option(None, "Trainer logs (trainer_state.json, trainer_log.jsonl, TensorBoard events).")

    def any_given(self) -> bool:
        return any(v is not None for v in self.to_dict().values())

    def as_kwargs(self, *names: str) -> dict[str, Any]:
        """The paths as keyword arguments (``names``: only those)."""
        d = self.to_dict()
        return {k: d[k] for k in names} if names else d
