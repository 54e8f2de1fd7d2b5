"""Where a content group may reach past the rows it names: rows outside every culprit group that hold one of a content
group's distinctive terms, and whose harm ranks above the other rows'.

A group found by harm names the rows whose harm stands out. When each of a defect's rows carries little harm (one
swapped word diluted by the rest of its story, a flipped one-word label) the group is a precise core of a larger set,
and the term its rows share is where the rest may be. The rows holding the term outside every group are tested as a
diagnose finding's rows are on the rest (:func:`gradian.verdict.culprits.carrying_sets` on the rows outside every group:
their positive harm at least ``enrichment`` x their share of those rows, a one-sided rank-sum test under the verdict's
one Bonferroni level, held in ``keep_frequency`` of the resamples of the regressed items). They are a hint and not
culprits: a term is shared by a topic as much as by a defect (rows about "Timmy" truly harm the items about Timmy), so
joining rows by term named innocent rows on clean runs (docs/benchmarks.md). They stay out of ``drop_rows``; the
report says how many there are and report.json lists them (``verdict.how.hints``) for the user to read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradian.options.verdict import VerdictOptions
from gradian.verdict.culprits import Group, carrying_sets
from gradian.verdict.terms import terms_of


@dataclass
class TermHint:
    """Rows outside the groups that hold a content group's term and carry the harm as a set."""

    term: str
    group: int  # position of the content group in the verdict's groups
    rows: list[int]  # the holders with harm above the median of every row, most harmful first
    holding: int  # rows outside every group that hold the term
    p: float  # one-sided rank-sum p of the holders' harm against the other rows'
    frequency: float | None  # share of the resamples in which the test holds; None when not measurable

    def to_dict(self) -> dict[str, Any]:
        return {
            "term": self.term,
            "group": self.group,
            "rows": self.rows,
            "size": len(self.rows),
            "holding": self.holding,
            "p": self.p,
            "frequency": self.frequency,
        }


def term_hints(
    S: np.ndarray | None,
    s: np.ndarray,
    rows: Sequence[int],
    groups: Sequence[Group],
    texts: Mapping[int, str] | None,
    policy: VerdictOptions,
    family: list[int] | None = None,
) -> list[TermHint]:
    """For each content group's distinctive terms (``Group.terms``): the rows outside every group holding the term,
    when they carry the harm of the rows outside every group (:func:`gradian.verdict.culprits.carrying_sets` on those
    rows, as explain-away reads the rest: the named rows' harm would dilute any set's share; ``family`` as there). The
    holders with harm above the median of every row are listed; a row once, under the first term that holds it."""
    if not texts or not groups:
        return []
    grouped = {r for g in groups for r in g.rows}
    at = np.array([j for j, r in enumerate(rows) if r not in grouped], dtype=int)
    if not len(at):
        return []
    terms_at = [terms_of(texts.get(rows[j], "")) for j in at]
    asked = [(gi, t) for gi, g in enumerate(groups) if g.cause == "content" for t in g.terms]
    masks = [np.array([term in tk for tk in terms_at], dtype=bool) for _, term in asked]
    above = s[at] > float(np.median(s))
    order = np.argsort(-s[at], kind="stable")
    S_rest = None if S is None else S[:, at]
    hinted: set[int] = set()
    out = []
    for k, p, freq in carrying_sets(S_rest, s[at], masks, policy, family):
        gi, term = asked[k]
        picked = [int(rows[at[j]]) for j in order if masks[k][j] and above[j] and int(rows[at[j]]) not in hinted]
        if picked:
            hinted |= set(picked)
            out.append(TermHint(term, gi, picked, int(masks[k].sum()), p, freq))
    return out
