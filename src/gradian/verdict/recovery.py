"""The verdict's expected effect: how much of the regression dropping its rows should bring back.

``expected_recovery`` is the share of the summed regression over the regressed items that re-training without
``drop_rows`` should remove. It is read from the harm the rows carry: their share of the positive harm to the
regressed items (``harm_share``), times ``VerdictOptions.recovery_per_harm_share``, capped at 1. The factor is the
least-squares slope through the origin of the retrains' measured recovery on that share, over the planted-fault runs
of both suites (stories260K and the real-model suite: ``bench/results/expected_recovery.md``). Where the rows carry a
share of the harm, the rest stays: a model that also forgot from the data as a whole keeps that part of the
regression.

The calibration is on regressions scored by NLL. On a regression scored by preference (the fine-tune's own replies
against the base model's: :func:`gradian.attribute.stages.find_regressions`) the harm share misses what a retrain
brings back (on the real-model suite's refusal runs it says about half, where the retrain brings back more than the
whole shift: ``bench/results/expected_recovery.md``), so the verdict gives no number there: :func:`calibrated` is
False and the words say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gradian.options.verdict import VerdictOptions

# Retrain recovery per unit of the named rows' share of the positive harm (bench/results/expected_recovery.md).
RECOVERY_PER_HARM_SHARE = VerdictOptions().recovery_per_harm_share


def harm_share(scores: Mapping[int, float], rows: Sequence[int]) -> float:
    """The rows' share of the positive harm (0 when no row has any)."""
    pos = sum(s for s in scores.values() if s > 0)
    mine = sum(max(0.0, scores.get(r, 0.0)) for r in set(rows))
    return mine / pos if pos > 0 else 0.0


def expected_recovery(scores: Mapping[int, float], rows: Sequence[int], per_share: float = RECOVERY_PER_HARM_SHARE
                      ) -> float:  # fmt: skip
    """The share of the summed regression that dropping ``rows`` should bring back (see the module doc)."""
    return min(1.0, per_share * harm_share(scores, rows))


def calibrated(regression: Mapping[str, Any] | None) -> bool:
    """Whether ``expected_recovery`` is calibrated for a regression (report.json ``settings.regression``): scored by
    NLL, not by preference."""
    return (regression or {}).get("score") != "preference"


def uncalibrated_sentence(n_rows: int) -> str:
    return (
        f"How much of the shift dropping the {n_rows} row{'s' if n_rows != 1 else ''} brings back is not estimated: "
        "their share of the harm is calibrated on regressions scored by NLL, and scored by preference it missed the "
        "retrains (bench/results/expected_recovery.md). gradian verify measures it."
    )


def recovery_sentence(share: float, n_rows: int) -> str:
    return (
        f"Dropping the {n_rows} row{'s' if n_rows != 1 else ''} should bring back about {share:.0%} of the summed "
        "regression (verdict.expected_recovery: their share of the harm, calibrated on retrains; gradian verify "
        "measures it)."
    )
