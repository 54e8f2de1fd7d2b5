"""Near-duplicate detection with word-shingle MinHash and LSH banding, vectorized with numpy: O(n) hashing plus
the candidate pairs that share a band, each verified by its exact shingle Jaccard. Deterministic (crc32, fixed
seeds)."""

from __future__ import annotations

import re
import zlib
from collections import defaultdict
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from itertools import chain
from typing import Any

import numpy as np

_WORD = re.compile(r"\w+")
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def set_jaccard(a: AbstractSet[Any], b: AbstractSet[Any]) -> float:
    """``|a & b| / |a | b|``; 0 where either set is empty."""
    return len(a & b) / max(1, len(a | b))


# ASCII bytes that are not \w (letters, digits, underscore) -> space: for an ASCII text, splitting on whitespace
# after this translation gives exactly the words of _WORD.findall, three times faster
_ASCII_NONWORD = bytes(c if c < 128 and (chr(c).isalnum() or c == 95) else 32 for c in range(256))


def _words(text: str, max_words: int) -> Sequence[bytes | str]:
    """The first ``max_words`` words (``_WORD`` matches) of the lowercased text: bytes for an ASCII text, else str
    (a word hashes the same either way: by its UTF-8 bytes)."""
    if text.isascii():
        return text.encode().lower().translate(_ASCII_NONWORD).split()[:max_words]
    return _WORD.findall(text.lower())[:max_words]


def _word_hash(w: bytes | str) -> int:
    b = w if isinstance(w, bytes) else w.encode()
    return zlib.crc32(b) | (zlib.crc32(b, 0x9E3779B9) << 32)


def _row_words(texts: list[str], k: int, max_words: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Each row's first ``max_words`` words (padded to ``k``) as 64-bit word hashes, concatenated, and the counts.
    Each distinct word is hashed once; the mapping runs in C (dict.fromkeys, map)."""
    rows = [_words(t, max_words) for t in texts]
    for r, words in enumerate(rows):
        if len(words) < k:
            rows[r] = [*words, *(f"\x00pad{i}" for i in range(k - len(words)))]
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    flat: list[bytes | str] = list(chain.from_iterable(rows))
    vocab = dict.fromkeys(flat, 0)
    table = np.fromiter(map(_word_hash, vocab), np.uint64, len(vocab))
    for i, w in enumerate(vocab):
        vocab[w] = i
    ids = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
    return table[ids], lengths


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
    v = np.empty_like(sh)  # one buffer for every permutation: no allocation per pass
    with np.errstate(over="ignore"):
        for p in range(n_perm):
            np.multiply(sh, a[p], out=v)
            v += b[p]
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
        starts, ends = np.concatenate([[0], bounds]), np.concatenate([bounds, [len(sk)]])
        shared = ends - starts >= 2  # only the rows that share this band's key with another row
        for a, z in zip(starts[shared].tolist(), ends[shared].tolist(), strict=True):
            g = sorted(order[a:z].tolist())
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
        jac = set_jaccard(sets[i], sets[j])
        if jac >= threshold:
            out.append((i, j, round(jac, 3)))
    return out
