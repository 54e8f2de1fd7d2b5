"""Forgetting: a regression the training data causes as a whole, not through a few rows.

A narrow fine-tune (math rows only, say) pulls the model away from what it did before on everything else. Its
signature in the attribution has two parts, both read from the run itself:

1. **The bulk carries the harm.** The rows the verdict does not name carry most of the positive harm to the
   regressed items (``forgetting_bulk_share``): no group explains the regression, whatever group stands out beside
   it. (The share of them with positive harm, ``positive_share``, and its sign test ``p`` are reported, not required:
   on a real chat model that forgot general chat from math rows, 78 of 160 rows had positive harm at the final adapter.)
2. **The items are unlike the training data.** A regressed item is *far* when its nearest training row (word-set
   Jaccard similarity) is less similar to it than nearly every training row's nearest other row is to that row (under
   the ``forgetting_far_quantile`` of those similarities): learned from the file, no word lists.

When both hold the report says the model forgot, with the fix people use for it (mix general data back in, fewer
steps, a lower learning rate or rank), beside any group of rows that also stands out.

**The bulk's top is no group** (:func:`bulk_top`). Forgetting's harm is spread, but not evenly: the same rows of the
bulk carry most of it whatever items are resampled, so once a defect's rows are set aside they stand out on the rest
as a stable head of their own. Beside a group that a finding or a shared label describes, a content group that
nothing describes is that top when the model forgot: it is set aside (listed to read, not named), and the verdict
names the described group beside forgetting. On the real-model suite such a group was math rows from the bulk both
times it met a described one (12 and 11 rows, none planted, beside the refusals D123 flags); on the planted-fault
suite no verdict changes (CHANGELOG.md).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradian.options.verdict import VerdictOptions
from gradian.tails import binomial_tail
from gradian.verdict.groups import Group

_WORD = re.compile(r"[^\W\d_]{3,}")
# Rows compared for the training data's own nearest-neighbour similarities: enough for a stable low quantile, cheap
# on any file (set intersections of a few hundred word sets).
SAMPLE_ROWS = 400
POOL_ROWS = 2000


@dataclass(frozen=True)
class Forgetting:
    """What :func:`forgetting` measured, and whether it calls the regression forgetting."""

    bulk_share: float  # the rows not named: their share of the positive harm
    positive_share: float
    p: float
    n_bulk: int
    far_items: int
    n_items: int
    far_cut: float  # the similarity under which an item is far
    found: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "bulk_share": round(self.bulk_share, 4),
            "positive_share": round(self.positive_share, 4),
            "p": self.p,
            "n_bulk": self.n_bulk,
            "far_items": self.far_items,
            "n_items": self.n_items,
            "far_cut": round(self.far_cut, 4),
        }


def words(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


class _Pool:
    """Word sets to compare against, indexed by word: one set's Jaccard similarity to every set of the pool is a
    count of shared words per pool set (``np.bincount`` over the sets that hold each of its words)."""

    def __init__(self, sets: Sequence[frozenset[str]]) -> None:
        held: dict[str, list[int]] = {}
        for j, s in enumerate(sets):
            for w in s:
                held.setdefault(w, []).append(j)
        self.held = {w: np.array(js, dtype=np.int64) for w, js in held.items()}
        self.sizes = np.array([len(s) for s in sets], dtype=np.int64)

    def similarities(self, a: frozenset[str]) -> np.ndarray:
        """:func:`gradian.diagnose.minhash.set_jaccard` of ``a`` and every set ``b`` of the pool."""
        n = len(self.sizes)
        parts = [self.held[w] for w in a if w in self.held]
        shared = np.bincount(np.concatenate(parts), minlength=n) if parts else np.zeros(n, dtype=np.int64)
        union = len(a) + self.sizes - shared
        if not a:
            return np.zeros(n)
        return np.divide(shared, union, out=np.zeros(n), where=(self.sizes > 0) & (union > 0))

    def nearest(self, a: frozenset[str], skip: int = -1) -> float:
        """The highest similarity of ``a`` to a set of the pool other than the one at ``skip``."""
        sims = self.similarities(a)
        if 0 <= skip < len(sims):
            sims[skip] = -1.0
        return max(0.0, float(sims.max())) if len(sims) else 0.0


def nearest(item: frozenset[str], pool: Sequence[frozenset[str]]) -> float:
    """The highest Jaccard similarity of ``item`` to any word set of ``pool``."""
    return _Pool(pool).nearest(item)


def far_cut(train: Sequence[frozenset[str]], quantile: float, seed: int = 0) -> float:
    """The ``quantile`` of the training rows' similarities to their nearest other row (a sample of rows against a
    sample pool)."""
    rng = random.Random(seed)
    idx = list(range(len(train)))
    pool = idx if len(idx) <= POOL_ROWS else rng.sample(idx, POOL_ROWS)
    probe = idx if len(idx) <= SAMPLE_ROWS else rng.sample(idx, SAMPLE_ROWS)
    index = _Pool([train[j] for j in pool])
    at = {j: k for k, j in enumerate(pool)}
    sims = sorted(index.nearest(train[i], at.get(i, -1)) for i in probe)
    return sims[min(len(sims) - 1, int(quantile * len(sims)))] if sims else 0.0


def forgetting(
    scores: Mapping[int, float],
    named: Sequence[int],
    item_texts: Sequence[str],
    train_texts: Mapping[int, str],
    policy: VerdictOptions | None = None,
) -> Forgetting | None:
    """Whether the regression is forgetting (see the module doc): ``scores`` are the rows' harm to the regressed
    items, ``named`` the rows the verdict names, ``item_texts`` the regressed items' texts. None when no row has
    positive harm or there is no text to compare."""
    policy = policy or VerdictOptions()
    pos_total = sum(s for s in scores.values() if s > 0)
    named_set = set(named)
    bulk = [s for r, s in scores.items() if r not in named_set]
    if pos_total <= 0 or not bulk or not item_texts or not train_texts:
        return None
    share = sum(s for s in bulk if s > 0) / pos_total
    pos = sum(1 for s in bulk if s > 0)
    p = binomial_tail(pos, len(bulk), 0.5)
    train = [words(t) for t in train_texts.values()]
    cut = far_cut(train, policy.forgetting_far_quantile)
    index = _Pool(train if len(train) <= POOL_ROWS else random.Random(1).sample(train, POOL_ROWS))
    far = sum(1 for t in item_texts if index.nearest(words(t)) < cut)
    found = share >= policy.forgetting_bulk_share and far >= policy.forgetting_far_share * len(item_texts)
    return Forgetting(share, pos / len(bulk), p, len(bulk), far, len(item_texts), cut, found)


def bulk_top(groups: Sequence[Group]) -> list[Group]:
    """The groups that are the top of a forgetting bulk (see the module doc): content groups that no finding and no
    shared label describe, beside a group that one does. Empty when no group is described or every one is."""
    described = [g for g in groups if g.cause == "mechanical" or g.shared or g.label]
    return [g for g in groups if g not in described] if described else []


FORGETTING_STEP = (
    "Mix general data like the regressed items back into the training set (a few percent of rows), or train fewer "
    "steps, at a lower learning rate or a lower LoRA rank: the regression comes from what the data as a whole "
    "teaches, so dropping rows will not bring it back."
)


def forgetting_sentence(f: Forgetting) -> str:
    return (
        f"The model forgot: the rows not named carry {f.bulk_share:.0%} of the harm, spread thin over them, and "
        f"{f.far_items} of the {f.n_items} regressed items are unlike any training row (less similar to their nearest "
        "row than nearly every training row is to its own): the fine-tune's data as a whole pulls the model away from "
        "them, and dropping rows will not bring that part back."
    )
