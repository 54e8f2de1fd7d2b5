"""Numbers read from JSON, YAML and reports, and percentages written into them: one home for every layer."""

from __future__ import annotations

import math
from typing import Any


def as_float(value: Any) -> float | None:
    """``value`` as a float (a number, or a numeric string such as "2e-4" or "NaN"); None for None, a bool or
    anything ``float()`` refuses."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def finite_float(value: Any) -> float | None:
    """:func:`as_float`, and None for NaN and infinities too."""
    f = as_float(value)
    return f if f is not None and math.isfinite(f) else None


def pct(share: Any, missing: str = "—") -> str:
    """A share (0.25) as a whole percentage ("25%"); ``missing`` for a value that is not a number."""
    f = as_float(share)
    return missing if f is None else f"{100.0 * f:.0f}%"
