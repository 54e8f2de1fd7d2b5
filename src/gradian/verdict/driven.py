"""Which regressed eval items a set of training rows drives, read from the rows' own per-item harm.

The attribution scores every (regressed item, training row) pair. For one item, the harm that a set of ``k`` blamed
rows carries is compared with the harm of ``k`` rows drawn at random from all scored rows: under that draw the sum has
mean ``k * mean`` and variance ``k * var * (n - k) / (n - 1)`` (sampling without replacement), so

    z_item = (harm of the blamed rows - k * mean) / sqrt(k * var * (n - k) / (n - 1))

and the item is *driven* by the rows when ``z_item > z``. Random rows pass on a share ``P(Z > z)`` of the items
(normal tail), so the count of driven items is tested against ``Binomial(n_items, P(Z > z))``: a significant count
says the rows single out these items, not chance. These items are the ones the verdict's claim is about: a
regression on items the blamed rows carry no harm for (ordinary drift, another cause) is not theirs to recover, and
``gradian verify`` measures its recovery on the driven items for that reason (as well as on every regressed item).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradian.tails import binomial_tail, normal_tail


@dataclass(frozen=True)
class DrivenItems:
    """The regressed items a row set drives, and whether there are more of them than random rows would give."""

    items: list[int]  # eval indices of the driven items
    n_items: int  # regressed items scored
    n_rows: int  # blamed rows among the scored rows
    z: float  # the per-item cut
    alpha: float  # the count test's level
    p: float  # P(at least this many driven items | random rows)
    z_by_item: dict[int, float] = field(default_factory=dict)

    @property
    def expected_by_chance(self) -> float:
        """How many items random rows of the same size would drive on average."""
        return self.n_items * normal_tail(self.z)

    @property
    def significant(self) -> bool:
        return bool(self.items) and self.p < self.alpha

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "n_items": self.n_items,
            "n_driven": len(self.items),
            "n_rows": self.n_rows,
            "z": self.z,
            "alpha": self.alpha,
            "expected_by_chance": round(self.expected_by_chance, 3),
            "p": self.p,
            "significant": self.significant,
            "z_by_item": {str(i): round(v, 2) for i, v in self.z_by_item.items()},
        }


def driven_items(
    item_scores: np.ndarray,
    items: Sequence[int],
    rows: Sequence[int],
    blamed: Sequence[int],
    *,
    z: float,
    alpha: float,
) -> DrivenItems:
    """The items (``items[i]`` is the eval index of ``item_scores[i]``; ``rows[j]`` the training row of column ``j``)
    on which the ``blamed`` rows carry more harm than random rows of the same size would (see the module doc)."""
    S = np.asarray(item_scores, dtype=np.float64)
    col = {int(r): j for j, r in enumerate(rows)}
    pick = sorted({col[int(r)] for r in blamed if int(r) in col})
    n, k = S.shape[1], len(pick)
    z_by: dict[int, float] = {}
    if 0 < k < n:
        mean, var = S.mean(axis=1), S.var(axis=1) * k * (n - k) / (n - 1)
        harm = S[:, pick].sum(axis=1)
        for i, (h, m, v) in enumerate(zip(harm, mean, var, strict=True)):
            z_by[int(items[i])] = float((h - k * m) / math.sqrt(v)) if v > 0 else 0.0
    driven = [i for i in map(int, items) if z_by.get(i, 0.0) > z]
    p = binomial_tail(len(driven), len(items), normal_tail(z))
    return DrivenItems(driven, len(items), k, z, alpha, p, z_by)


def driven_sentence(found: DrivenItems) -> str:
    """The verdict's sentence on the items its rows drive (the items `gradian verify` judges them on)."""
    k, m, n = found.n_rows, len(found.items), found.n_items
    rows = f"{k} row{'s' if k != 1 else ''}"
    of_n = f"of the {n} regressed item{'s' if n != 1 else ''}"
    how = f"their harm on each is over {found.z:g} standard deviations above that of {k} random rows"
    if not found.significant:
        return (
            f"The {rows} drive only {m} {of_n}, no more than {k} random rows would "
            f"({found.expected_by_chance:.1f}): their harm is spread over the items and singles none out, so check "
            "with gradian verify before dropping them."
        )
    if m == n:
        return f"The {rows} drive {'the one regressed item' if n == 1 else f'every one {of_n}'} ({how})."
    rest = "The other one is not theirs" if n - m == 1 else f"The other {n - m} are not theirs"
    return (
        f"The {rows} drive {m} {of_n} ({how}; random rows would drive "
        f"{found.expected_by_chance:.1f}): their harm singles those items out. {rest}: ordinary drift, or a cause "
        "these rows do not carry."
    )
