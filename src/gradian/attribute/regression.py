"""Which eval items regressed: a change larger than the fine-tune's ordinary drift, not just any rise.

Every fine-tune moves every item a little. A fixed cut-off (say, NLL up 0.05 nats/token) counts items whose loss
rose by a few percent of drift as regressed, and their gradients then dilute the query. The rule here learns the drift
from the eval set itself:

- each item's change is measured relative to its base loss, ``r = (finetuned - base) / base`` (a rise of 0.05 nats
  is large on an item the base model already predicts at 0.07 nats/token, and small on one at 2.0);
- the *drift* is the typical size of the changes that went the other way: the root mean square of the negative
  ``r`` (the items that got better move by ordinary fine-tuning, not by what the culprit rows taught). With no item
  that improved, the drift is unknown and only the floors below apply;
- an item regressed when ``r > noise_multiple x drift`` and its NLL rose by more than ``min_delta`` nats/token and
  by more than ``min_relative`` of its base loss.

When items rose but none beyond the drift, the report says the change is within noise instead of ranking noise.
The numbers are calibrated on the planted-fault suite (``bench/scenarios``, docs/benchmarks.md), not on one run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

DEFAULT_MIN_DELTA = 0.02


@dataclass(frozen=True)
class RegressionRule:
    """When an eval item counts as regressed (see the module docstring)."""

    min_delta: float = field(
        default=DEFAULT_MIN_DELTA,
        metadata={"help": "Floor: the completion NLL must rise by more than this (nats/token)."},
    )
    min_relative: float = field(
        default=0.05, metadata={"help": "Floor: the NLL must rise by more than this share of the base NLL."}
    )
    noise_multiple: float = field(
        default=2.0,
        metadata={"help": "The relative rise must exceed this multiple of the drift (RMS of the items that improved)."},
    )

    def __post_init__(self) -> None:
        for name in ("min_delta", "min_relative", "noise_multiple"):
            v = getattr(self, name)
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class RegressionCall:
    """The rule applied to one eval set."""

    regressed: np.ndarray  # (n_items,) bool
    delta: np.ndarray  # finetuned - base, nats/token
    relative: np.ndarray  # delta / base
    drift: float | None  # RMS relative change of the items that improved; None when none improved
    cutoff: float  # the relative rise an item needed
    rose: int  # items whose NLL rose at all beyond the floors (regressed or within drift)

    @property
    def within_noise(self) -> bool:
        """Items rose past the floors, but none beyond the drift."""
        return self.rose > 0 and not bool(self.regressed.any())

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "drift": None if self.drift is None else float(self.drift),
            "cutoff": float(self.cutoff),
            "rose": int(self.rose),
            "regressed": int(self.regressed.sum()),
            "n_items": int(len(self.regressed)),
        }


def call_regressions(base_nll: np.ndarray, ft_nll: np.ndarray, rule: RegressionRule | None = None) -> RegressionCall:
    """Apply ``rule`` to per-item mean completion NLLs (NaN items never regress)."""
    rule = rule or RegressionRule()
    base = np.asarray(base_nll, dtype=np.float64)
    ft = np.asarray(ft_nll, dtype=np.float64)
    delta = ft - base
    ok = np.isfinite(delta)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(ok, delta / np.maximum(base, 1e-6), np.nan)
    neg = rel[ok & (rel < 0)]
    drift = float(np.sqrt(np.mean(neg**2))) if neg.size else None
    cutoff = max(rule.min_relative, rule.noise_multiple * drift if drift is not None else 0.0)
    floors = ok & (delta > rule.min_delta) & (rel > rule.min_relative)
    regressed = floors & (rel > cutoff)
    return RegressionCall(regressed, delta, rel, drift, cutoff, int(floors.sum()))


def regression_summary(call: RegressionCall) -> str:
    """One clause saying what the rule found: how many rose, the drift and the cut-off."""
    drift = "no item improved, so the drift is unknown" if call.drift is None else f"drift {call.drift:.0%}"
    if call.within_noise:
        return (
            f"{call.rose} rose, but none by more than the fine-tune's ordinary drift ({drift} of the base NLL; "
            f"an item needed +{call.cutoff:.0%})"
        )
    return f"{int(call.regressed.sum())} rose by more than +{call.cutoff:.0%} of their base NLL ({drift})"
