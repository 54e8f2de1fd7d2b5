"""Culprit groups: the rows that stand out, split by what they share (a mechanical finding's rows, or content
described by its findings, label and distinctive terms), and settled along the rows' gradient directions (steps 3 and
5 of :mod:`gradian.verdict.culprits`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradian.options.verdict import VerdictOptions
from gradian.verdict.stats import robust
from gradian.verdict.terms import distinctive_terms, finding_train_rows, terms_of

# Findings about what the rows *say* (not how they became tokens), for findings saved before rules declared it.
LEGACY_CONTENT_RULES = frozenset({"D104", "D105", "D116", "D117", "D118", "D121", "D122", "D123"})


def finding_cause(f: Mapping[str, Any]) -> str:
    """``mechanical``, ``content`` or ``setup``: what the rule behind a finding declares (older findings: by code)."""
    cause = f.get("cause")
    if cause in ("mechanical", "content", "setup"):
        return str(cause)
    code = str(f.get("code") or "")
    if code in LEGACY_CONTENT_RULES:
        return "content"
    return "mechanical" if code.startswith("D") else "setup"


@dataclass
class Group:
    """Head rows that share one thing."""

    cause: str  # "mechanical" | "content"
    rows: list[int]  # training-row indices, most harmful first
    harm_share: float  # share of the total positive harm
    finding: Mapping[str, Any] | None = None  # the mechanical finding that defines it
    shared: list[dict[str, Any]] = field(default_factory=list)  # content findings flagging >= flag_share of it
    terms: list[str] = field(default_factory=list)  # distinctive terms of its rows
    by_direction: int = 0  # rows that joined it by their gradient direction (extend_by_direction)
    by_finding: int = 0  # rows that joined it because the carrying finding that describes it flags them
    tokens: list[str] = field(default_factory=list)  # the token keys its harm sits on (gradian.verdict.harm_tokens)
    token_hold: float | None = None  # share of the rows holding them whose harm sits there too
    by_tokens: int = 0  # rows that joined it because their harm sits on its tokens
    off_tokens: list[int] = field(default_factory=list)  # its profiled rows with none of their harm on its tokens
    label: str | None = None  # the one completion >= flag_share of its rows share (content groups; a label)
    label_share: float | None = None  # the share of its rows whose completion that is
    aside: str = ""  # set aside: "" (too light or too few, culprits.minor) or "bulk" (forgetting's top, bulk_top)

    def to_dict(self) -> dict[str, Any]:
        f = self.finding
        return {
            "cause": self.cause,
            "rows": self.rows,
            "size": len(self.rows),
            "harm_share": self.harm_share,
            "finding": None if f is None else {"code": f.get("code"), "name": f.get("name")},
            "shared": self.shared,
            "terms": self.terms,
            "by_direction": self.by_direction,
            "by_finding": self.by_finding,
            "tokens": self.tokens,
            "token_hold": self.token_hold,
            "by_tokens": self.by_tokens,
            "off_tokens": self.off_tokens,
            **({"label": self.label, "label_share": self.label_share} if self.label else {}),
            **({"aside": self.aside} if self.aside else {}),
        }


def settle(
    groups: list[Group],
    emb: np.ndarray | None,
    s: np.ndarray,
    rows: Sequence[int],
    pos_total: float,
    policy: VerdictOptions,
) -> None:
    """Settle the groups: with the row directions, :func:`reassign_by_direction` then :func:`extend_by_direction`;
    then a mechanical group left under ``min_group_share`` of the groups' rows (a finding that flags a few rows of a
    larger group) joins the largest group: its rows harm, but its finding does not describe the defect."""
    if emb is not None and groups:
        reassign_by_direction(groups, emb, s, rows, pos_total, policy)
        extend_by_direction(groups, emb, s, rows, pos_total, policy)
    total = sum(len(g.rows) for g in groups)
    for g in sorted(groups, key=lambda g: len(g.rows)):
        big = max(groups, key=lambda x: len(x.rows))
        if g is not big and g.cause == "mechanical" and len(g.rows) < max(2, policy.min_group_share * total):
            big.rows += g.rows
            g.rows = []
    groups[:] = [g for g in groups if g.rows]
    reorder(groups, s, rows, pos_total)


def reorder(groups: list[Group], s: np.ndarray, rows: Sequence[int], pos_total: float) -> None:
    """After rows moved between groups: each group's rows most harmful first, and its share of the positive harm."""
    score = {int(r): float(v) for r, v in zip(rows, s, strict=True)}
    for g in groups:
        g.rows = sorted(g.rows, key=lambda r: (-score.get(r, 0.0), r))
        g.harm_share = sum(max(0.0, score.get(r, 0.0)) for r in g.rows) / pos_total if pos_total > 0 else 0.0


def group_rows(
    head: Sequence[int],
    score_of: Mapping[int, float],
    pos_total: float,
    findings: Sequence[Mapping[str, Any]],
    terms: RowTerms,
    n_rows: int,
    policy: VerdictOptions,
    carriers: Sequence[Mapping[str, Any]] = (),
    grouped: Collection[int] = (),
    nested: Collection[str] = (),
) -> list[Group]:
    """Split the head into mechanical groups (one per enriched mechanical finding, extended by the finding's other
    rows, whatever their harm, when ``policy.extend_mechanical``) and one content group. A mechanical
    finding in ``carriers`` (its flagged rows carry the harm: :func:`harmful_findings`) needs only two rows in the
    head: its own test is stronger evidence than its share of the head. A finding in ``nested`` (its harm is a
    narrower finding's: refusals are short answers too) makes no group. Rows in ``grouped`` (earlier groups') are
    never added again."""

    def share(rs: Sequence[int]) -> float:
        return sum(max(0.0, score_of.get(r, 0.0)) for r in rs) / pos_total if pos_total > 0 else 0.0

    def ordered(rs: set[int]) -> list[int]:
        return sorted(rs, key=lambda r: (-score_of.get(r, 0.0), r))

    left = set(head)
    taken: set[int] = set()
    groups: list[Group] = []
    flagged = [(f, set(finding_train_rows(f))) for f in findings
               if finding_cause(f) == "mechanical" and str(f.get("code")) not in nested]  # fmt: skip
    while left:
        best = None
        for f, frows in flagged:
            hit = frows & left
            carried = any(f is c for c in carriers)
            if len(hit) < (2 if carried else max(2, policy.min_group_share * len(head))):
                continue
            if not carried and n_rows and len(hit) / len(head) < policy.enrichment * len(frows) / n_rows:
                continue
            if best is None or len(hit) > len(best[1]):
                best = (f, hit)
        if best is None:
            break
        f, hit = best
        if policy.extend_mechanical:  # the fix is the finding's: every row it flags belongs to the group
            frows = next(r for g, r in flagged if g is f)
            hit = hit | (frows - taken - set(grouped))
        group = Group("mechanical", ordered(hit), share(list(hit)), finding=f)
        for g, grows in flagged:  # other mechanical findings on the same rows explain them too (truncation + cut)
            if g is not f and len(grows & hit) >= policy.flag_share * len(hit):
                group.shared.append(_shared(g, len(grows & hit), len(hit)))
        groups.append(group)
        left -= hit
        taken |= hit
        flagged = [(g, r) for g, r in flagged if g is not f]
    if groups and len(left) < max(2, policy.min_group_share * len(taken | left)):
        # too few for a group of their own: they ride along (as often the rows a finding missed as rows beside it)
        big = max(groups, key=lambda g: len(g.rows))
        big.rows = ordered(set(big.rows) | left)
        big.harm_share = share(big.rows)
        left = set()
    if left:  # a content group; beside a mechanical one, a light or small one is set aside later (minor)
        rest = ordered(left)
        group = Group("content", rest, share(rest))
        describe_content(group, findings, terms, policy)
        if policy.extend_content:  # a carrying finding that describes it: every row it flags belongs to the group
            more = {r for c in describing(group, carriers) for r in finding_train_rows(c)}
            more -= left | taken | set(grouped)
            rest = ordered(left | more)
            group.rows, group.harm_share, group.by_finding = rest, share(rest), len(more)
        groups.append(group)
    groups.sort(key=lambda g: -g.harm_share)
    return groups


class RowTerms:
    """Each row's words (:func:`gradian.report.clusters.terms_of` of its text), read once per verdict: a content
    group is described when it is made and again on its final rows, each time against every other row. ``labels``:
    each row's completion, when it is short enough to be a label."""

    def __init__(self, texts: Mapping[int, str] | None, labels: Mapping[int, str] | None = None) -> None:
        self.texts = texts or {}
        self.labels = labels or {}
        self._memo: dict[int, Counter[str]] = {}

    def of(self, row: int) -> Counter[str]:
        got = self._memo.get(row)
        if got is None:
            got = self._memo[row] = terms_of(self.texts[row])
        return got


def describing(g: Group, findings: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The findings among ``findings`` that describe content group ``g`` (flag at least ``flag_share`` of it: its
    ``shared``)."""
    codes = {sh.get("code") for sh in g.shared}
    return [f for f in findings if f.get("code") in codes]


def describe_content(
    group: Group, findings: Sequence[Mapping[str, Any]], terms: RowTerms, policy: VerdictOptions
) -> None:
    """A content group's traits from its rows as they are now: the content findings that flag at least
    ``flag_share`` of them (most rows first), the one completion that many of them share (``terms.labels``: each
    row's completion when it is short enough to be a label; without them, the target a shared finding names), and
    their distinctive terms against every other row with a text."""
    rows = set(group.rows)
    group.shared = []
    for f in findings:
        n_hit = len(set(finding_train_rows(f)) & rows) if finding_cause(f) == "content" else 0
        if n_hit and n_hit >= policy.flag_share * len(rows):
            group.shared.append(_shared(f, n_hit, len(rows)))
    group.shared.sort(key=lambda d: -d["count"])
    group.label, group.label_share = None, None
    if terms.labels:
        top = Counter(terms.labels[r] for r in group.rows if r in terms.labels).most_common(1)
        if top and top[0][1] >= policy.flag_share * len(rows):
            group.label, group.label_share = top[0][0], top[0][1] / len(rows)
    else:
        named = next((sh for sh in group.shared if sh.get("target")), None)
        if named is not None:
            group.label, group.label_share = str(named["target"]), float(named["share"])
    if terms.texts:
        inside = [terms.of(r) for r in group.rows if r in terms.texts]
        outside = [terms.of(r) for r in terms.texts if r not in rows]
        group.terms = distinctive_terms(inside, outside)


def direction_z(unit: np.ndarray, js: Sequence[int], bulk: np.ndarray) -> np.ndarray:
    """How close each row's direction is to the mean direction of rows ``js``, in robust spreads beyond how close the
    ``bulk`` rows are."""
    mean = unit[list(js)].mean(0)
    sim = unit @ (mean / max(float(np.linalg.norm(mean)), 1e-30))
    center, spread = robust(sim[bulk])
    return (sim - center) / spread


def reassign_by_direction(
    groups: list[Group], emb: np.ndarray, s: np.ndarray, rows: Sequence[int], pos_total: float, policy: VerdictOptions
) -> None:
    """A content group's rows that point a mechanical group's way (``extend_z`` as in :func:`extend_by_direction`)
    are that group's rows its finding missed. What is left of the content group is judged by :func:`minor`, which lists
    a small one instead of dropping it."""
    mech = [g for g in groups if g.cause == "mechanical" and len(g.rows) >= 2]
    content = [g for g in groups if g.cause == "content"]
    if emb.ndim != 2 or emb.shape[0] != len(s) or not mech or not content:
        return
    unit = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-30)
    col = {int(r): j for j, r in enumerate(rows)}
    bulk = s <= float(np.median(s))
    zs = [direction_z(unit, [col[r] for r in g.rows if r in col], bulk) for g in mech]
    for c in content:
        for r in list(c.rows):
            if r not in col:
                continue
            best = max(range(len(mech)), key=lambda i: zs[i][col[r]])
            if zs[best][col[r]] > policy.extend_z:
                c.rows.remove(r)
                mech[best].rows.append(r)
    groups[:] = [g for g in groups if g.rows]
    reorder(groups, s, rows, pos_total)


def extend_by_direction(
    groups: list[Group], emb: np.ndarray, s: np.ndarray, rows: Sequence[int], pos_total: float, policy: VerdictOptions
) -> None:
    """Each content group takes the rows (harm above the median, in no group yet) whose gradient direction is closer
    to the group's mean direction than ``extend_z`` robust spreads beyond how close the low-harm rows (harm at or
    below the median) are; a row close to two groups goes to the closer. A culprit group's weaker rows point the same
    way as its strongest ones, so they are found even when their harm alone does not stand out. A mechanical group
    is left as its finding made it: measured on the planted-fault suite, rows added to one by direction were mostly
    innocent once its finding named the defect's rows (docs/benchmarks.md, the planted-fault suite)."""
    if emb.ndim != 2 or emb.shape[0] != len(s):
        return
    unit = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-30)
    col = {int(r): j for j, r in enumerate(rows)}
    med = float(np.median(s))
    bulk = s <= med
    best_z = np.full(len(s), -np.inf)
    best_g = np.full(len(s), -1)
    for gi, g in enumerate(groups):
        js = [col[r] for r in g.rows if r in col]
        if g.cause != "content" or len(js) < 2:
            continue
        z = direction_z(unit, js, bulk)
        closer = z > best_z
        best_z[closer], best_g[closer] = z[closer], gi
    taken = {r for g in groups for r in g.rows}
    for j in np.flatnonzero((best_z > policy.extend_z) & (s > med)).tolist():
        if int(rows[j]) not in taken:
            groups[int(best_g[j])].rows.append(int(rows[j]))
            groups[int(best_g[j])].by_direction += 1
    reorder(groups, s, rows, pos_total)


def _shared(f: Mapping[str, Any], hit: int, size: int) -> dict[str, Any]:
    """A finding as a group's shared trait: which, how many of the group's rows, its fix, and the one completion its
    rows share when its evidence names it (a label, such as D116's repeated target)."""
    target = (f.get("evidence") or {}).get("target")
    out = {"code": f.get("code"), "name": f.get("name"), "count": hit, "share": hit / size, "fix": f.get("fix")}
    return out | ({"target": str(target)} if isinstance(target, str) and target.strip() else {})
