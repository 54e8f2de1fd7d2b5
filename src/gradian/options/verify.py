"""The options of `gradian verify` (and of ``gradian.verify.verify(...)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from gradian.options.base import OptionError, Options, option
from gradian.options.verdict import VerdictOptions

_VERDICT = VerdictOptions()  # the driven-items cut is the verdict's: verify judges its rows on those items


@dataclass(frozen=True)
class VerifyOptions(Options):
    """Which rows the re-trains drop, and how they are trained and measured."""

    name: ClassVar[str] = "verify"

    k: int | None = option(None, "Drop the top-K rows by score instead of the verdict's rows.", min=1)
    seed: int | None = option(None, "Training seed (default: the original run's).")
    seeds: int = option(
        1,
        "Re-train with this many training seeds (the seed, then the next ones) and average the recoveries; each "
        "extra seed also re-trains on every row as its own baseline and draws its own random rows.",
        min=1,
    )
    random_seed: int = option(0, "Seed of the random-rows control.")
    epochs: float | None = option(None, "Epochs for every re-train (implies a reference).")
    max_steps: int | None = option(None, "max_steps for every re-train (implies a reference).")
    reference: bool | None = option(
        None, "Also re-train on all rows as the baseline (default: when needed).", flag="--reference/--no-reference"
    )
    driven_z: float = option(
        _VERDICT.driven_z,
        "An item counts as driven by the blamed rows when their harm on it is this many standard deviations above "
        "that of random rows of the same size (gradian.verdict.driven).",
        min=0.0,
    )
    driven_alpha: float = option(
        _VERDICT.driven_alpha,
        "Recovery is judged on the driven items when there are more of them than random rows would give at this "
        "level (binomial test), else on every regressed item.",
        min=0.0,
    )
    device: str | None = option(None, "Device for measuring NLL (cpu, cuda; default auto).")
    dtype: str | None = option(None, "Model dtype for measuring NLL (default: the loader's).", cli=False)

    def _check(self) -> None:
        if self.driven_alpha > 1:
            raise OptionError(f"--driven-alpha {self.driven_alpha} is above 1", fix="pass a level between 0 and 1")

    def train_overrides(self) -> dict[str, Any]:
        """The TrainOptions keys these options set for every re-train."""
        return {k: v for k, v in (("epochs", self.epochs), ("max_steps", self.max_steps)) if v is not None}
