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


def apart(value: float, limit: float, *, percent: bool = False, digits: int = 2) -> tuple[str, str]:
    """``value`` and ``limit`` written with the fewest decimals (from ``digits``; whole numbers for ``percent``) at
    which they read differently, so that 0.596 against 0.6 is "0.596" under "0.600", not "0.60" under "0.60"."""
    scale, suffix, d = (100.0, "%", 0) if percent else (1.0, "", digits)
    while True:
        a, b = f"{scale * value:.{d}f}{suffix}", f"{scale * limit:.{d}f}{suffix}"
        if a != b or d >= 6 or value == limit:
            return a, b
        d += 1
