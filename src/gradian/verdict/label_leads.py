"""Where a spread harm leans: the rows of one label that carry the harm as a set, when no row of them stands out.

A mislabelled row's gradient points where a rightly labelled row of the same label points: both teach the label's
token in the same context. On a classification-style file the harm of a few flipped labels then reads as the whole
label's harm, graded, with no head that stands out and stays (docs/benchmarks.md: on every mislabel run of the
suite, flipped rows rank among their label's rows at AUC 0.5-0.87, and no cut of the ranking names them). The verdict
then says "spread", which alone would send the user to the learning rate while the labels are what to check.

So when the verdict is spread, each label (rows whose completion is short enough to be a label, :func:`label_of`,
shared by 2 to n - 2 rows) is tested as a diagnose finding's rows are (:func:`gradian.verdict.culprits.carrying_sets`:
positive harm at least ``enrichment`` x their share of the rows, a one-sided rank-sum test under the verdict's one
Bonferroni level, held in ``keep_frequency`` of the resamples of the regressed items). A label that carries it is a
*lead*: its rows are listed to check, most harmful first, and stay out of ``drop_rows``, since dropping a label's rows
takes the label out of the data and most of them may be right. Nothing here is a threshold of its own: the test and
its levels are the finding test's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradian.options.verdict import VerdictOptions
from gradian.verdict.culprits import carrying_sets


@dataclass
class LabelLead:
    """The rows of one label that carry a spread harm as a set."""

    label: str  # the completion they share (lowercased, spaces collapsed)
    rows: list[int]  # every row with that label, most harmful first
    harm_share: float  # their share of the positive harm
    row_share: float  # their share of the scored rows
    p: float  # one-sided rank-sum p of their harm against the other rows'
    frequency: float | None  # share of the resamples in which the test holds; None when not measurable

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "rows": self.rows,
            "size": len(self.rows),
            "harm_share": self.harm_share,
            "row_share": self.row_share,
            "p": self.p,
            "frequency": self.frequency,
        }


def label_leads(
    S: np.ndarray | None,
    s: np.ndarray,
    rows: Sequence[int],
    labels: Mapping[int, str] | None,
    policy: VerdictOptions,
    family: list[int] | None = None,
) -> list[LabelLead]:
    """The labels whose rows carry the harm ``s`` (row ``rows[j]`` has harm ``s[j]``; ``S`` the regressed items x
    rows, for the resamples), most harmful share first. ``family`` counts the verdict's tests (Bonferroni)."""
    if not labels:
        return []
    row_labels = [labels.get(int(r)) for r in rows]
    asked = [lab for lab, n in Counter(x for x in row_labels if x).items() if n >= 2]
    masks = [np.array([x == lab for x in row_labels], dtype=bool) for lab in asked]
    pos = np.clip(s, 0, None)
    total = float(pos.sum())
    order = np.argsort(-s, kind="stable")
    out = [
        LabelLead(
            asked[k],
            [int(rows[j]) for j in order if masks[k][j]],
            float(pos[masks[k]].sum()) / total if total > 0 else 0.0,
            float(masks[k].mean()),
            p,
            freq,
        )
        for k, p, freq in carrying_sets(S, s, masks, policy, family)
    ]
    return sorted(out, key=lambda lead: -lead.harm_share)
