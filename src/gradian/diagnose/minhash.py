"""Near-duplicate detection with word-shingle MinHash and LSH banding, vectorized with numpy: O(n) hashing plus
the candidate pairs that share a band, each verified by its exact shingle Jaccard. Deterministic (crc32, fixed
seeds)."""

from __future__ import annotations

import re
import zlib
from collections import defaultdict

import numpy as np

_WORD = re.compile(r"\w+")
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def _row_words(texts: list[str], k: int, max_words: int = 256) -> tuple[np.ndarray, np.ndarray]:
    vocab: dict[str, int] = {}
    setdefault = vocab.setdefault
    ids: list[int] = []
    lengths = np.empty(len(texts), dtype=np.int64)
    findall = _WORD.findall
    for r, t in enumerate(texts):
        words = findall(t.lower())[:max_words]
        if len(words) < k:
            words = words + [f"\x00pad{i}" for i in range(k - len(words))]
        lengths[r] = len(words)
        ids.extend([setdefault(w, len(vocab)) for w in words])
    table = np.array(
        [zlib.crc32(w.encode("utf-8")) | (zlib.crc32(w.encode("utf-8"), 0x9E3779B9) << 32) for w in vocab],
        dtype=np.uint64,
    )
    return table[np.array(ids, dtype=np.int64)], lengths


def shingle_hashes(texts: list[str], k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """All rows' k-word shingle hashes concatenated, and each row's start offset (len(texts)+1 offsets)."""
    words, lengths = _row_words(texts, k)
    n = len(words)
    coeffs = [np.uint64(c) for c in (1, 0x100000001B3, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9)]
    coeffs = (coeffs * ((k // len(coeffs)) + 1))[:k]
    m = n - k + 1
    with np.errstate(over="ignore"):
        sh = words[0:m] * coeffs[0]
        for j in range(1, k):
            sh = sh + words[j : j + m] * coeffs[j]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    counts = lengths - k + 1  # every row has >= 1 shingle (padded)
    pos = np.repeat(starts, counts) + (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return sh[pos], offsets


def signatures(sh: np.ndarray, offsets: np.ndarray, n_perm: int = 32, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 2**63, size=n_perm, dtype=np.uint64) | np.uint64(1)
    b = rng.integers(0, 2**63, size=n_perm, dtype=np.uint64)
    sig = np.empty((len(offsets) - 1, n_perm), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for p in range(n_perm):
            v = sh * a[p] + b[p]
            sig[:, p] = np.minimum.reduceat(v, offsets[:-1])
    return sig


def near_duplicate_pairs(
    texts: list[str], threshold: float = 0.9, k: int = 5, bands: int = 8, max_group: int = 64
) -> list[tuple[int, int, float]]:
    """Pairs (i, j, jaccard) with i < j whose k-word shingle sets have Jaccard >= threshold."""
    if len(texts) < 2:
        return []
    sh, offsets = shingle_hashes(texts, k)
    n_perm = bands * 4
    sig = signatures(sh, offsets, n_perm)
    rows_per_band = n_perm // bands
    candidates: set[tuple[int, int]] = set()
    for bnd in range(bands):
        block = sig[:, bnd * rows_per_band : (bnd + 1) * rows_per_band]
        with np.errstate(over="ignore"):
            key = block[:, 0].copy()
            for j in range(1, rows_per_band):
                key = key * np.uint64(0x100000001B3) ^ block[:, j]
        order = np.argsort(key, kind="stable")
        sk = key[order]
        bounds = np.flatnonzero(np.diff(sk)) + 1
        for grp in np.split(order, bounds):
            if len(grp) < 2:
                continue
            g = sorted(int(x) for x in grp)
            if len(g) > max_group:  # a big cluster: pair each with its first member only
                candidates.update((g[0], x) for x in g[1:])
            else:
                candidates.update((g[i], g[j]) for i in range(len(g)) for j in range(i + 1, len(g)))
    sets: dict[int, set[int]] = defaultdict(set)
    out = []
    for i, j in sorted(candidates):
        if i not in sets:
            sets[i] = set(sh[offsets[i] : offsets[i + 1]].tolist())
        if j not in sets:
            sets[j] = set(sh[offsets[j] : offsets[j + 1]].tolist())
        si, sj = sets[i], sets[j]
        jac = len(si & sj) / max(1, len(si | sj))
        if jac >= threshold:
            out.append((i, j, round(jac, 3)))
    return out
