"""The options of `gradian train` (:func:`gradian.train.train_lora`): the hyperparameters of a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradian.options.base import OptionError, Options, option

TRL_MAX_LENGTH = 1024  # TRL SFTConfig's max_length default


@dataclass(frozen=True)
class TrainOptions(Options):
    """Hyperparameters of a `gradian train` run. Defaults suit a small model on a CPU; override any of them."""

    name: ClassVar[str] = "train"

    lr: float = option(2e-4, "Learning rate.")
    epochs: float = option(3.0, "Epochs.")
    max_steps: int = option(-1, "Stop after this many optimizer steps (> 0 overrides epochs).")
    batch_size: int = option(8, "Per-device batch size.")
    eval_batch_size: int = option(8, "Per-device eval batch size.", cli=False)
    grad_accum: int = option(1, "Gradient accumulation steps.")
    max_length: int | None = option(TRL_MAX_LENGTH, "Truncate rows to this many tokens (TRL's default).")
    r: int = option(8, "LoRA rank.")
    alpha: float = option(16.0, "LoRA alpha.")
    dropout: float = option(0.05, "LoRA dropout.")
    target_modules: list[str] | str = option(
        "all-linear", "Comma-separated module names, or all-linear (every linear projection but the output head)."
    )
    use_rslora: bool = option(False, "Rank-stabilized LoRA scaling.", flag="--use-rslora/--no-rslora")
    seed: int = option(42, "Seed (LoRA init, shuffling, dropout).")
    completion_only: bool = option(
        True,
        "Loss on the completion only (prompt/completion rows) or on every token.",
        flag="--completion-only/--full-loss",
    )
    assistant_only: bool = option(
        False, "Loss on assistant turns only (chat rows; needs {% generation %} markers).", cli=False
    )
    add_eos: bool = option(True, "Append EOS to each completion / text (TRL >= 0.16).", flag="--add-eos/--no-eos")
    logging_steps: int = option(10, "Log every N steps.")
    lr_scheduler_type: str = option("linear", "Learning-rate schedule (transformers' names).", cli=False)
    warmup_ratio: float = option(0.0, "Warmup as a share of the steps.", cli=False)
    weight_decay: float = option(0.0, "AdamW weight decay.", cli=False)
    max_grad_norm: float = option(1.0, "Gradient clipping norm.", cli=False)
    eval_strategy: str = option("epoch", "When an eval file is given: epoch, steps or no.", cli=False)
    eval_steps: int | None = option(None, "Eval every N steps (eval_strategy steps).", cli=False)
    save_steps: int | None = option(
        None, "Also save checkpoint-<step>/ (adapter + trainer_state.json) every N steps (default: final adapter only)."
    )
    bf16: bool = option(False, "Train in bf16.", cli=False)
    fp16: bool = option(False, "Train in fp16.", cli=False)
    gradient_checkpointing: bool = option(False, "Recompute activations in the backward pass.", cli=False)
    cpu_threads: int | None = option(None, "torch threads for this run (default: torch's).")

    def _check(self) -> None:
        if self.batch_size < 1 or self.grad_accum < 1 or self.eval_batch_size < 1:
            raise OptionError("batch sizes and grad_accum must be >= 1", fix="set them to 1 or more")
        for key, least, eg in (
            ("cpu_threads", 1, "1"),
            ("save_steps", 1, "50"),
            ("r", 1, "8"),
            ("max_length", 2, "1024"),
        ):
            v = getattr(self, key)
            if v is not None and v < least:
                raise OptionError(f"{key} must be >= {least}", where=key, fix=f"omit it or set e.g. {eg}")
        if self.epochs <= 0 and self.max_steps <= 0:
            raise OptionError("nothing to train: epochs <= 0 and no max_steps", fix="set epochs > 0")
