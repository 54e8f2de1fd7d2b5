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
        metadata={"help": "The rise must exceed this multiple of the drift (the spread of the items that improved)."},
    )
    scale: str = field(
        default="relative",
        metadata={"help": "Compare rises as 'relative' (share of the base NLL) or 'absolute' (nats/token) changes."},
    )

    def __post_init__(self) -> None:
        for name in ("min_delta", "min_relative", "noise_multiple"):
            v = getattr(self, name)
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.scale not in ("relative", "absolute"):
            raise ValueError(f"scale must be 'relative' or 'absolute', got {self.scale!r}")

    def to_dict(self) -> dict[str, float | str]:
        return asdict(self)


@dataclass(frozen=True)
class RegressionCall:
    """The rule applied to one eval set."""

    regressed: np.ndarray  # (n_items,) bool
    delta: np.ndarray  # finetuned - base, nats/token
    relative: np.ndarray  # delta / base
    drift: float | None  # spread of the changes of the items that improved (rule.scale); None when none improved
    cutoff: float  # the rise an item needed (rule.scale)
    rose: int  # items whose NLL rose at all beyond the floors (regressed or within drift)
    scale: str = "relative"

    @property
    def within_noise(self) -> bool:
        """Items rose past the floors, but none beyond the drift."""
        return self.rose > 0 and not bool(self.regressed.any())

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "drift": None if self.drift is None else float(self.drift),
            "cutoff": float(self.cutoff),
            "scale": self.scale,
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
    change = rel if rule.scale == "relative" else delta
    neg = change[ok & (change < 0)]
    # half-normal scale of the improvements: median |x| = 0.6745 sigma; robust to one item that improved a lot
    drift = float(1.4826 * np.median(np.abs(neg))) if neg.size else None
    floor = rule.min_relative if rule.scale == "relative" else rule.min_delta
    cutoff = max(floor, rule.noise_multiple * drift if drift is not None else 0.0)
    floors = ok & (delta > rule.min_delta) & (rel > rule.min_relative)
    regressed = floors & (change > cutoff)
    return RegressionCall(regressed, delta, rel, drift, cutoff, int(floors.sum()), rule.scale)


def describe_change(x: float, scale: str) -> str:
    """A change on the rule's scale in words: '12% of the base NLL' or '0.080 nats/token'."""
    return f"{x:.0%} of the base NLL" if scale == "relative" else f"{x:.3f} nats/token"


def regression_summary(call: RegressionCall) -> str:
    """One clause saying what the rule found: how many rose, the drift and the cut-off."""
    drift = (
        "no item improved, so the drift is unknown"
        if call.drift is None
        else f"drift {describe_change(call.drift, call.scale)}"
    )
    need = describe_change(call.cutoff, call.scale)
    if call.within_noise:
        return (
            f"{call.rose} rose, but none by more than the fine-tune's ordinary drift ({drift}; an item needed +{need})"
        )
    return f"{int(call.regressed.sum())} rose by more than +{need} ({drift})"
