"""Content groups extended by the tokens their harm sits on.

A content defect puts its harm on a few tokens: a flipped pronoun on " he", a renamed entity on the new name's pieces,
a swapped word on that word. Such a group's weaker rows often rank below the head and point only part of the way the
head's gradients do, so neither the harm cut nor :func:`gradian.verdict.culprits.extend_by_direction` reaches them; but
their harm sits on the same tokens. Per named content group (:class:`gradian.attribute.token_profiles.TokenProfiles`
of the top rows):

- its *harm tokens* are the fewest token keys that carry ``token_share`` of its rows' positive harm, when they are
  few (at most the 8 keys a profile keeps per row; a group whose harm is spread over its words has none);
- a profiled row outside every group, with harm above the median, joins when ``token_share`` of its positive harm
  sits on those tokens;
- unless the tokens are what the rows *are* rather than a defect: when ``token_share`` of the rows that hold the
  tokens (the most common of them) put that much of their harm there, as every row of a label does (" sad." rows),
  the group takes nobody. On the planted-fault suite and both held-out sets that share is 0.57-0.74 for mislabelled
  rows and 0.02-0.30 for the other content defects, but for a new name whose first piece only the planted rows hold
  (0.79-0.98; the group already holds them all) (CHANGELOG.md, token profiles);
- and a profiled row of the group with *none* of its positive harm on those tokens (among the keys that carry most
  of it) does not share the group's defect: it stood out beside it, leading other items. It leaves the group
  (``off_tokens``), whether or not the tokens are a label. On the suite, the three held-out sets and SmolLM2, 55 of
  the 60 rows that leave are innocent; 5 are flipped-pronoun rows, one per run (CHANGELOG.md, token profiles).

Rows join only a group the verdict already names: the tokens never decide whether the harm is concentrated. The
attribution profiles only the rows that can move (:class:`gradian.attribute.token_profiles.ProfileNeed`: the groups'
rows, then the rows that hold their harm tokens); profiles taken for other tokens (a report re-read with other
verdict options) extend no group.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

import numpy as np

from gradian.attribute.token_profiles import TokenProfiles, harm_tokens


class Group(Protocol):
    """What this module reads and sets of :class:`gradian.verdict.culprits.Group`."""

    cause: str
    rows: list[int]
    tokens: list[str]
    token_hold: float | None
    by_tokens: int
    off_tokens: list[int]


def extend_by_tokens(
    groups: Sequence[Group],
    profiles: TokenProfiles,
    s: np.ndarray,
    rows: Sequence[int],
    share: float,
    set_aside: Collection[int] = (),
) -> None:
    """Each content group takes the rows whose harm sits on its harm tokens and lets go of its profiled rows with none
    there (the module docstring; ``share``: the policy's ``token_share``); sets each content group's ``tokens``,
    ``token_hold``, ``by_tokens`` and ``off_tokens``. A row that fits two groups goes to the one holding more of its
    harm; rows ``set_aside`` (listed to read) join none."""
    if share <= 0 or not profiles.rows:
        return
    med = float(np.median(s))
    taken = {int(r) for g in groups for r in g.rows} | {int(r) for r in set_aside}
    free = [int(r) for r, v in zip(rows, s, strict=True) if v > med and int(r) not in taken and int(r) in profiles.rows]
    best: dict[int, tuple[float, Group]] = {}
    for g in groups:
        if g.cause != "content" or len(g.rows) < 2:
            continue
        g.tokens = harm_tokens(g.rows, profiles, share)
        if not g.tokens or not profiles.covers(g.tokens):  # profiles taken for other tokens: no reading of them
            continue
        off = {r for r in g.rows if r in profiles.rows and profiles.share_on(r, g.tokens) <= 0}
        g.off_tokens = [r for r in g.rows if r in off]
        g.rows[:] = [r for r in g.rows if r not in off]
        holders = max(profiles.holders.get(k, 0) for k in g.tokens)
        on = {r: f for r in profiles.rows if (f := profiles.share_on(r, g.tokens)) >= share}
        g.token_hold = len(on) / holders if holders else 1.0
        if g.token_hold >= share:
            continue
        for r in free:
            f = on.get(r, 0.0)
            if f and f > best.get(r, (0.0, g))[0]:
                best[r] = (f, g)
    for r, (_, g) in sorted(best.items()):
        g.rows.append(r)
        g.by_tokens += 1
