"""The statistics the verdict reads: a robust centre and spread, Efron's local false discovery rate over a binned
kernel density, the one-sided rank-sum test, seeded resamples of the regressed items and the Jaccard agreement of
two row sets. Pure numpy."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gradian.options.verdict import VerdictOptions


def robust(x: np.ndarray) -> tuple[float, float]:
    """Median and robust spread (1.4826 x MAD; the standard deviation, or 1, when the MAD is 0) of the finite values."""
    x = x[np.isfinite(x)]
    if not len(x):
        return float("nan"), 1.0
    med = float(np.median(x))
    spread = 1.4826 * float(np.median(np.abs(x - med)))
    return med, spread if spread > 0 else (float(np.std(x)) or 1.0)


def local_fdr(s: np.ndarray, med: float, spread: float, grid: int = 1024) -> np.ndarray:
    """Efron's local false discovery rate of each value: ``pi0 x f0(s) / f(s)`` with the empirical null ``f0`` a
    normal at the bulk's median and robust spread, ``f`` a Gaussian kernel density of all values (Scott's bandwidth,
    binned on ``grid`` points so it costs O(n)) and ``pi0`` the share of values within one spread over a normal's
    68.3%, capped at 1."""
    s = np.asarray(s, dtype=np.float64)
    out = np.ones(len(s))
    ok = np.isfinite(s)
    x = s[ok]
    sd = float(np.std(x)) if len(x) else 0.0
    if len(x) < 3 or sd <= 0 or not (np.isfinite(med) and np.isfinite(spread) and spread > 0):
        return out  # a value that is not finite is never a discovery
    centers, density, _ = binned_density(x, grid)
    f = np.interp(x, centers, density)
    f0 = np.exp(-0.5 * ((x - med) / spread) ** 2) / (spread * np.sqrt(2 * np.pi))
    pi0 = min(1.0, float(np.mean(np.abs(x - med) < spread)) / 0.6827)
    out[ok] = np.clip(pi0 * f0 / np.maximum(f, 1e-300), 0.0, 1.0)
    return out


def binned_density(x: np.ndarray, grid: int = 1024) -> tuple[np.ndarray, np.ndarray, float]:
    """A Gaussian kernel density of ``x`` (at least 3 values, not all equal; Scott's bandwidth) on ``grid`` bin
    centres, binned so it costs O(n): (centres, density, bandwidth)."""
    h = 1.06 * float(np.std(x)) * len(x) ** -0.2  # Scott's rule
    lo, hi = float(x.min()) - 4 * h, float(x.max()) + 4 * h
    counts, edges = np.histogram(x, bins=grid, range=(lo, hi))
    step = edges[1] - edges[0]
    half = int(np.ceil(4 * h / step))
    offsets = np.arange(-half, half + 1) * step
    kernel = np.exp(-0.5 * (offsets / h) ** 2) / (h * np.sqrt(2 * np.pi))
    density = np.convolve(counts / len(x), kernel, mode="same")
    return (edges[:-1] + edges[1:]) / 2, density, h


def rank_sum_p(s: np.ndarray, flagged: Sequence[np.ndarray]) -> list[float]:
    """For each mask in ``flagged``: the one-sided Mann-Whitney rank-sum test's p (normal approximation, ties given
    their mean rank) that the flagged values rank this far above the others if both came from one distribution."""
    n = len(s)
    order = np.argsort(s, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(s[order]) != 0])  # first position of each run of equal values
    counts = np.diff(np.r_[starts, n])
    ranks = np.empty(n)
    ranks[order] = np.repeat(starts + (counts + 1) / 2.0, counts)  # 1-based mean rank of each run
    tie = float((counts.astype(np.float64) ** 3 - counts).sum()) / (n * (n - 1)) if n > 1 else 0.0
    out = []
    for fm in flagged:
        n1 = int(fm.sum())
        n2 = n - n1
        var = n1 * n2 / 12.0 * ((n + 1) - tie)
        if n1 == 0 or n2 == 0 or var <= 0:
            out.append(1.0)
            continue
        u = float(ranks[fm].sum()) - n1 * (n1 + 1) / 2
        out.append(0.5 * math.erfc((u - n1 * n2 / 2 - 0.5) / math.sqrt(2 * var)))
    return out


def resampled_sums(S: np.ndarray, policy: VerdictOptions) -> Iterator[np.ndarray]:
    """The row harms of ``bootstrap`` resamples of the regressed items (rows of ``S``, with replacement, seeded), each
    of ``resample_items`` items when there are more."""
    rng = np.random.default_rng(policy.seed)
    m = S.shape[0]
    size = min(m, int(policy.resample_items)) if policy.resample_items else m
    for _ in range(int(policy.bootstrap)):
        yield np.bincount(rng.integers(0, m, size=size), minlength=m).astype(S.dtype) @ S


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    union = int((a | b).sum())
    return 1.0 if union == 0 else int((a & b).sum()) / union
