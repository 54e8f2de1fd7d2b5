"""Culprit rows from the harm itself: is the harm concentrated, in which rows, how sure, and what they share.

Pure numpy over the per-item harm matrix ``S`` (regressed items x training rows; a row's harm is its
column sum):

1. **Head.** The rows whose harm stands out from the bulk of the file's rows. By default (``head_fdr``) a row is in
   the head when its local false discovery rate is below ``head_fdr`` (Efron's empirical null: a normal at the
   bulk's median and robust spread, against a kernel density of all rows; 0.2 is Efron's conventional cut), so the
   cut adapts to how many rows stand out: a fixed z cut keeps a few percent of innocent rows whatever the file; with
   ``head_fdr = 0`` the cut is ``median + head_z x robust spread``. At most ``max_head_fraction`` of the rows. Only
   the positive side is read: in a contradiction (a renamed entity) the rows that still teach the old fact are
   strongly *helpful*, so the negative tail is signal too and is no null for the positive one.
2. **Concentrated or spread.** The head is a culprit only when it carries at least ``min_head_share`` of the total
   positive harm and it is *stable*: over ``bootstrap`` resamples of the regressed items (with replacement, at most
   ``resample_items`` of them, so that a large eval set's sums do not make any head look steady), the rows that lead
   each resample (its ``len(head)`` most harmful) agree with the head (mean Jaccard
   ``>= min_stability``): the same rows lead, whatever the cut would be in the resample. Rows that lead fewer than
   ``keep_frequency`` of the resamples are left out of it. Harm that comes from one or two items, or from whichever
   rows happen to be longest, does not survive that. The share bar is waived when every group is a finding's rows
   that the finding test (step 4) found carrying the harm: that test already weighs their harm against their share of
   the rows, and the bulk's positive harm grows with the file, so a fixed share would call a defect in 5% of 1,200
   rows that carries 3x its share of the harm spread.
3. **Groups.** The head rows are grouped by what they share: a *mechanical* diagnose finding (one that declares how
   rows became tokens: truncation, EOS, cut completions, loops) that flags a sizeable part of the head and is enriched
   there (its share of the head is at least ``enrichment`` x its share of the file) makes a mechanical group; the
   remaining head rows form a content group, described by their distinctive terms and by the content findings that
   flag at least ``flag_share`` of them.
4. **Findings that carry the harm.** The flagged rows of a finding that reports a problem (a warning or an error; an
   info finding is a note on what rows share, such as a generic opening the eval prompts reuse) are also tested as a
   group, whether or not they stand out one by one: when their positive harm is at least ``enrichment`` x their share
   of the rows and their harm ranks above the other rows' (one-sided Mann-Whitney rank-sum test at ``finding_alpha``
   over the number of findings tested, Bonferroni), in the full set and in ``keep_frequency`` of the resamples, the
   flagged rows with harm above the median join the head. This finds a defect that a fifth of the file shares, where
   the planted rows inflate the bulk's spread so much that no head stands out, and a group whose head is unstable
   while its finding's rows clearly carry the harm.
5. **Extension.** A content group's weaker rows point the way its strongest do: it takes the rows with harm above
   the median whose gradient direction (the attribution's row embeddings) is ``extend_z`` robust spreads closer to
   the group's mean direction than the low-harm rows are. A mechanical group is its finding's rows: it takes the
   finding's other rows, those whose harm on these items helps too (the defect is in them all, and the fix is the
   finding's), but no row by direction (where the finding names the defect's rows, direction adds only innocent
   ones); a content group's rows that point a mechanical group's way move to it.
6. **Explain away.** The rows the groups hold are set aside and the rest is read again (steps 1, 2 and 4 on the
   rest): a stable head there, or a finding whose rows carry the rest's harm, is a further group (two defects at
   once, or a defect's weaker half). Every finding test of the verdict shares one Bonferroni level. The rest is
   also read on the regressed items no group drives (:mod:`gradian.verdict.driven` at ``driven_z``, as `gradian
   verify` reads them): a second defect's items are outweighed in the sum by the first's, so its rows may stand out
   only there. A stable head found on those items joins only when its rows also carry the rest's harm over every
   regressed item (the finding test of step 4 on its rows), so rows that lead a few drifting items do not. Repeated
   until nothing more is found or the groups hold ``max_head_fraction`` of the rows. The culprit share test (step 2)
   reads the groups.
7. **Minor groups.** Beside a mechanical group, a content group that carries under ``min_head_share`` of the positive
   harm, or holds under ``min_group_share`` of the groups' rows after the direction moves, is set aside
   (:func:`minor`): listed for the user to read, not named. A finding names the defect's rows; head rows it does not
   flag, too light or too few to be a group on their own, lead some items beside the defect.
8. **Harm tokens** (with the attribution's token profiles, ``--token-profiles``). Once the harm is found
   concentrated, each named content group takes the profiled rows whose harm sits on the few tokens its own harm
   sits on, unless those tokens are what the rows are, and lets go of its profiled rows with none of their harm
   there (:mod:`gradian.verdict.harm_tokens`, ``token_share``); the tokens never undo the decision. A content
   group's findings and terms are then read on its final rows.

After the decision, rows outside the groups that hold a content group's distinctive term are tested as a finding's
rows are and listed as rows to read (:mod:`gradian.verdict.term_hints`), never added to the groups.

Every number lives in :class:`gradian.options.VerdictOptions` and is recorded in report.json (``verdict.policy``);
the defaults are calibrated on the planted-fault suite (``bench/scenarios``; docs/benchmarks.md), never on one run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from gradian.attribute.token_profiles import TokenProfiles
from gradian.diagnose.types import Severity
from gradian.numbers import apart
from gradian.options.verdict import VerdictOptions
from gradian.verdict.driven import driven_items
from gradian.verdict.harm_tokens import extend_by_tokens
from gradian.verdict.stats import jaccard, local_fdr, rank_sum_p, resampled_sums, robust
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
    tokens: list[str] = field(default_factory=list)  # the token keys its harm sits on (gradian.verdict.harm_tokens)
    token_hold: float | None = None  # share of the rows holding them whose harm sits there too
    by_tokens: int = 0  # rows that joined it because their harm sits on its tokens
    off_tokens: list[int] = field(default_factory=list)  # its profiled rows with none of their harm on its tokens
    label: str | None = None  # the one completion >= flag_share of its rows share (content groups; a label)
    label_share: float | None = None  # the share of its rows whose completion that is

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
            "tokens": self.tokens,
            "token_hold": self.token_hold,
            "by_tokens": self.by_tokens,
            "off_tokens": self.off_tokens,
            **({"label": self.label, "label_share": self.label_share} if self.label else {}),
        }


@dataclass
class FindingTest:
    """A diagnose finding whose flagged rows carry the harm (:func:`harmful_findings`)."""

    finding: Mapping[str, Any]
    flagged: np.ndarray  # mask over the scored rows
    p: float  # one-sided rank-sum p of the flagged rows' harm against the other rows'
    frequency: float | None = None  # share of the resamples in which the test holds; None when not measurable
    on_rest: bool = False  # tested on the rows left once the first groups were set aside (explain-away)

    def to_dict(self) -> dict[str, Any]:
        f = self.finding
        return {
            "code": f.get("code"),
            "name": f.get("name"),
            "rows": int(self.flagged.sum()),
            "p": self.p,
            "frequency": self.frequency,
            "on_rest": self.on_rest,
        }


@dataclass(frozen=True)
class UndrivenRead:
    """Rows that stood out on the regressed items the earlier groups do not drive, and carry the rest's harm."""

    rows: int  # rows that joined
    items: int  # the items read: regressed items no earlier group drives
    of_items: int  # all regressed items
    p: float  # rank-sum p of their harm against the other rest rows', over every regressed item
    z: float  # the driven-item cut (policy.driven_z)


@dataclass
class Culprits:
    """The culprit decision for one report."""

    concentrated: bool
    head: list[int]  # training-row indices, most harmful first (also when not concentrated: the candidate)
    head_share: float  # share of the positive harm the head carries
    stability: float | None  # see ``basis``; None when not measurable
    groups: list[Group]
    reason: str  # why concentrated or not, in words
    findings: list[FindingTest] = field(default_factory=list)  # findings whose flagged rows carry the harm
    # "head": stability is the resampled heads' mean Jaccard with the head; "finding": no head stood out and the
    # groups rest on the finding tests, and stability is the least share of resamples in which one of them held
    basis: str = "head"
    raw_head: int = 0  # rows whose harm stood out on their own in the full set (before the resamples)
    tests: int = 0  # finding tests made (one Bonferroni family; gradian.verdict.term_hints continues it)
    undriven: list[UndrivenRead] = field(default_factory=list)  # heads found on the items no group drives
    set_aside: list[Group] = field(default_factory=list)  # content groups too light beside a mechanical one (minor)

    def to_dict(self) -> dict[str, Any]:
        return {
            "concentrated": self.concentrated,
            "head": self.head,
            "head_share": self.head_share,
            "stability": self.stability,
            "basis": self.basis,
            "raw_head": self.raw_head,
            "groups": [g.to_dict() for g in self.groups],
            "findings": [t.to_dict() for t in self.findings],
            "undriven": [asdict(u) for u in self.undriven],
            "set_aside": [g.to_dict() for g in self.set_aside],
            "reason": self.reason,
        }


def head_mask(s: np.ndarray, policy: VerdictOptions) -> np.ndarray:
    """Rows whose harm stands out from the bulk, positive, at most ``max_head_fraction`` of the rows (the most
    harmful ones): ``s > median + head_z x robust spread``, or with ``head_fdr`` the rows whose local false discovery
    rate is below it."""
    s = np.asarray(s, dtype=np.float64)
    n = len(s)
    if n == 0:
        return np.zeros(0, dtype=bool)
    med, spread = robust(s)
    if policy.head_fdr > 0:
        mask = (local_fdr(s, med, spread) < policy.head_fdr) & (s > med) & (s > 0)
    else:
        mask = (s > med + policy.head_z * spread) & (s > 0)
    return cap_head(s, mask, policy)


def cap_head(s: np.ndarray, mask: np.ndarray, policy: VerdictOptions) -> np.ndarray:
    """``mask``, or the ``max_head_fraction`` most harmful rows when it holds more."""
    cap = max(1, int(policy.max_head_fraction * len(s)))
    if mask.sum() <= cap:
        return mask
    out = np.zeros(len(s), dtype=bool)
    out[np.argsort(-s, kind="stable")[:cap]] = True
    return out


def find_culprits(
    item_scores: np.ndarray | None,
    scores: np.ndarray,
    rows: Sequence[int],
    *,
    findings: Sequence[Mapping[str, Any]] = (),
    texts: Mapping[int, str] | None = None,
    embeddings: np.ndarray | None = None,
    policy: VerdictOptions | None = None,
    token_profiles: TokenProfiles | None = None,
    labels: Mapping[int, str] | None = None,
) -> Culprits:
    """Decide whether the harm is concentrated and in which rows. ``scores[j]`` is the harm of training row
    ``rows[j]``; ``item_scores`` (regressed items x rows, same column order) adds the stability check;
    ``embeddings`` (rows x k, same order: each row's gradient direction) let each group take the rows that point its
    way, and ``token_profiles`` the rows whose harm sits on its tokens, once the harm is found concentrated;
    ``labels`` (row -> its completion, when short enough to be a label) tell a group whose rows share one."""
    policy = policy or VerdictOptions()
    s = np.asarray(scores, dtype=np.float64)
    S = None if item_scores is None else np.asarray(item_scores, dtype=np.float64)
    if S is not None and not (S.ndim == 2 and S.shape[1] == len(s) and S.shape[0] >= policy.min_items_for_stability):
        S = None
    emb = None if embeddings is None or policy.extend_z <= 0 else np.asarray(embeddings, dtype=np.float64)
    rd = _Reading(S, s, [int(r) for r in rows], findings, texts, emb, policy, labels)
    head = stable_head(S, s, policy)
    harmful = harmful_findings(S, s, rd.rows, findings, policy, rd.family)
    carriers = [t.finding for t in harmful]
    seeded = np.logical_or.reduce([t.flagged for t in harmful], initial=False) & rd.above
    groups: list[Group] = []
    stability, basis = head.stability, "head"
    if head.stable and head.kept.any():
        groups = rd.group(head.kept | seeded, carriers)
    elif seeded.any():  # no head stands out, but the rows a finding flags carry the harm
        groups = rd.group(seeded, carriers)
        freqs = [t.frequency for t in harmful if t.frequency is not None]
        stability, basis = (min(freqs) if freqs else None), "finding"
    undriven = _explain_away(rd, groups, harmful, carriers)
    groups, set_aside = minor(groups, policy)
    culprit_rows, head_share = rd.named(groups, head.kept)
    concentrated, reason = _decision(head, groups, culprit_rows, head_share, harmful, basis, policy)
    if concentrated and groups and token_profiles is not None:  # the tokens never undo the decision
        before = [replace(g, rows=list(g.rows)) for g in groups]
        extend_by_tokens(groups, token_profiles, s, rd.rows, policy.token_share, [r for g in set_aside for r in g.rows])
        _reorder(groups, s, rd.rows, rd.pos_total)
        groups, lighter = minor(groups, policy)  # rows that left by their tokens can leave a group too light
        named, share = rd.named(groups, head.kept)
        still, why = _decision(head, groups, named, share, harmful, basis, policy)
        if still:
            culprit_rows, head_share, reason = named, share, why
            set_aside += lighter
        else:
            groups = before
    if not concentrated:
        groups, undriven, set_aside = [], [], []
        stability, basis = head.stability, "head"
    for g in groups + set_aside:  # rows joined or left by direction or tokens: what a content group shares
        if g.cause == "content":
            describe_content(g, findings, rd.terms, policy)
    return Culprits(
        concentrated, culprit_rows, head_share, stability, groups, reason, harmful, basis, head.raw, rd.family[0],
        undriven, set_aside,
    )  # fmt: skip


def minor(groups: list[Group], policy: VerdictOptions) -> tuple[list[Group], list[Group]]:
    """(groups to name, content groups set aside). Beside a mechanical group, a content group is set aside when it
    carries under ``min_head_share`` of the positive harm, or holds fewer than ``min_group_share`` of the groups' rows
    once its rows that point the mechanical group's way have moved there. The finding names the defect's rows; head
    rows it does not flag, too light or too few to be a group on their own, lead some items beside the defect. (Head
    rows too few for a content group in the first place ride along in the mechanical group, :func:`group_rows`: they
    are as often rows the finding missed.) On the planted-fault suite and both held-out sets every second defect's
    group carries over a quarter of the harm, and the 29 rows set aside in 6 runs hold no planted row
    (CHANGELOG.md, the planted-fault suite)."""
    if not any(g.cause == "mechanical" for g in groups):
        return groups, []
    few = max(2, policy.min_group_share * sum(len(g.rows) for g in groups))
    named: list[Group] = []
    light: list[Group] = []
    for g in groups:
        minor_group = g.cause == "content" and (g.harm_share < policy.min_head_share or len(g.rows) < few)
        (light if minor_group else named).append(g)
    return named, light


@dataclass
class _Reading:
    """What every reading of one verdict shares: the harm, the rows, the findings, the policy and the count of
    finding tests made (one Bonferroni family)."""

    S: np.ndarray | None
    s: np.ndarray
    rows: list[int]
    findings: Sequence[Mapping[str, Any]]
    texts: Mapping[int, str] | None
    emb: np.ndarray | None
    policy: VerdictOptions
    labels: Mapping[int, str] | None = None
    family: list[int] = field(default_factory=lambda: [0])

    def __post_init__(self) -> None:
        self.terms = RowTerms(self.texts, self.labels)
        self.score_of = {r: float(v) for r, v in zip(self.rows, self.s, strict=True)}
        self.pos_total = float(np.clip(self.s, 0, None).sum())
        self.above = self.s > float(np.median(self.s)) if len(self.s) else np.zeros(0, dtype=bool)  # a finding's
        # rows join with harm above the median of every row

    def ranked(self, mask: np.ndarray) -> list[int]:
        return [self.rows[j] for j in np.argsort(-self.s, kind="stable") if mask[j]]

    def named(self, groups: Sequence[Group], kept: np.ndarray) -> tuple[list[int], float]:
        """(the rows the groups name, most harmful first, and their share of the positive harm); without groups,
        the stable head's rows and share."""
        if not groups:
            share = float(self.s[kept].clip(0).sum()) / self.pos_total if self.pos_total > 0 else 0.0
            return self.ranked(kept), share
        rows = sorted({r for g in groups for r in g.rows}, key=lambda r: (-self.score_of.get(r, 0.0), r))
        return rows, sum(g.harm_share for g in groups)

    def group(
        self, mask: np.ndarray, carriers: Sequence[Mapping[str, Any]], groups: Sequence[Group] = ()
    ) -> list[Group]:
        """``groups`` and new groups of the rows in ``mask`` (:func:`group_rows`), settled together (``_settle``)."""
        grouped = {x for g in groups for x in g.rows}
        out = list(groups) + group_rows(
            self.ranked(mask), self.score_of, self.pos_total, self.findings, self.terms, len(self.rows), self.policy,
            carriers, grouped,
        )  # fmt: skip
        _settle(out, self.emb, self.s, self.rows, self.pos_total, self.policy)
        return out


def _explain_away(
    rd: _Reading, groups: list[Group], harmful: list[FindingTest], carriers: list[Mapping[str, Any]]
) -> list[UndrivenRead]:
    """Set aside what the groups explain and read the rest again, until nothing more is found (step 6 of the module
    doc): for a head of its own, on every item and on the items no group drives, and for findings whose rows carry
    the rest's harm (a second defect's share of all harm is diluted by the first). ``groups``, ``harmful`` and
    ``carriers`` grow in place; returns the heads found on the undriven items."""
    S, s, rows, policy = rd.S, rd.s, rd.rows, rd.policy
    live = np.ones(0 if S is None else S.shape[0], dtype=bool)  # regressed items no group drives yet
    undriven: list[UndrivenRead] = []
    read: set[int] = set()  # rows a head has held: each round sets aside at least one more row, so the loop ends
    while groups:
        grouped = {x for g in groups for x in g.rows}  # unchanged until this round's groups are made
        read |= grouped
        if len(read) >= policy.max_head_fraction * len(rows):
            break
        rest = np.array([r not in read for r in rows])
        at = np.flatnonzero(rest)
        S_rest = None if S is None else S[:, rest]
        sub = stable_head(S_rest, s[rest], policy)
        more = np.zeros(len(s), dtype=bool)
        if sub.stable and sub.kept.any():
            more[at[sub.kept]] = True
        if S is not None and S_rest is not None and policy.driven_z > 0:  # and on the items no group drives
            live &= ~driven_mask(S, [j for j, r in enumerate(rows) if r in grouped], live, policy)
            if (on_live := undriven_head(S_rest, live, s[rest], policy, rd.family)) is not None:
                more[at[on_live[0]]] = True
                undriven.append(on_live[1])
        rest_rows = [rows[j] for j in at]
        new = [t for t in harmful_findings(S_rest, s[rest], rest_rows, rd.findings, policy, rd.family, on_rest=True)
               if not any(t.finding is c for c in carriers)]  # fmt: skip
        for t in new:
            more[at[t.flagged & rd.above[rest]]] = True
        if not more.any():
            break
        harmful += new
        carriers += [t.finding for t in new]
        read |= set(rd.ranked(more))
        groups[:] = rd.group(more, carriers, groups)
    return undriven


def driven_mask(S: np.ndarray, cols: Sequence[int], live: np.ndarray, policy: VerdictOptions) -> np.ndarray:
    """The ``live`` items (rows of ``S``) that the columns ``cols`` drive (:func:`gradian.verdict.driven.driven_items`),
    when they drive more of them than random columns would; else none."""
    idx = np.flatnonzero(live)
    out = np.zeros(len(live), dtype=bool)
    if len(idx):
        found = driven_items(S[idx], range(len(idx)), range(S.shape[1]), cols, z=policy.driven_z,
                             alpha=policy.driven_alpha)  # fmt: skip
        if found.significant:
            out[idx[found.items]] = True
    return out


def undriven_head(
    S_rest: np.ndarray, live: np.ndarray, s_rest: np.ndarray, policy: VerdictOptions, family: list[int]
) -> tuple[np.ndarray, UndrivenRead] | None:
    """The rest (``S_rest``: every regressed item x the rows outside the groups; ``s_rest`` its column sums) read on
    the items no group drives (``live``): a second defect's items are swamped in the sum by the first's, so its rows
    may stand out only there. The stable head found there (a mask over the rest) counts only when its rows also carry
    the rest's harm over every regressed item (:func:`carrying_sets`, in the verdict's Bonferroni family): rows that
    lead a few drifting items do not."""
    n_live = int(live.sum())
    if not policy.min_items_for_stability <= n_live < len(live):
        return None
    S_live = S_rest[live]
    head = stable_head(S_live, S_live.sum(axis=0), policy)
    if not (head.stable and head.kept.any()):
        return None
    carried = carrying_sets(S_rest, s_rest, [head.kept], policy, family)
    if not carried:
        return None
    return head.kept, UndrivenRead(int(head.kept.sum()), n_live, len(live), float(carried[0][1]), policy.driven_z)


def _decision(
    head: Head,
    groups: Sequence[Group],
    culprit_rows: Sequence[int],
    head_share: float,
    harmful: Sequence[FindingTest],
    basis: str,
    policy: VerdictOptions,
) -> tuple[bool, str]:
    """Whether the culprit rows make a concentrated verdict, and why or why not, in words. The share bar is for rows
    that stand out one by one; groups that are each a finding's rows the finding test found carrying the harm (at
    ``enrichment`` x their share of the rows, by rank and in the resamples) need no other: in a large file the bulk's
    positive harm grows with its rows, and a fixed share would call a defect that 5% of 1,200 rows share spread."""
    grouped = bool(groups)
    if not grouped and head.raw and not head.stable:
        got, need = apart(head.stability or 0.0, policy.min_stability)
        return False, (
            f"the {head.raw} rows that stand out change when the regressed items are resampled (agreement "
            f"{got}, under the {need} a culprit group needs)"
        )
    if not culprit_rows:
        return False, "no row's harm stands out from the rest of the rows"
    carriers = [t.finding for t in harmful]
    by_findings = grouped and all(g.cause == "mechanical" and any(g.finding is f for f in carriers) for g in groups)
    if head_share < policy.min_head_share and not by_findings:
        got, need = apart(head_share, policy.min_head_share, percent=True)
        return False, (
            f"the {len(culprit_rows)} rows that stand out carry {got} of the harm, under the {need} a culprit "
            "group needs"
        )
    tests = [f"the {int(t.flagged.sum())} rows {t.finding.get('code')} flags rank above the others, p = {t.p:.1g}"
             for t in harmful]  # fmt: skip
    how = "stand out from the rest and carry" if basis == "head" else "carry"
    reason = f"{len(culprit_rows)} rows {how} {head_share:.0%} of the harm"
    return True, reason + (f" ({'; '.join(tests)})" if tests else "")


@dataclass
class Head:
    """The rows whose harm stands out, and how well they survive resampling the regressed items."""

    raw: int  # rows in the head of the full set
    kept: np.ndarray  # head rows that also lead keep_frequency of the resamples (among their len(head) most harmful)
    stability: float | None  # mean Jaccard of the head with the rows leading each resample; None: not measurable
    stable: bool  # stability is not measurable, or at least min_stability with a row kept


def stable_head(S: np.ndarray | None, s: np.ndarray, policy: VerdictOptions) -> Head:
    """:func:`head_mask` of ``s``, checked against ``bootstrap`` resamples of ``S``'s items (rows of ``S`` sum to
    ``s``): in each resample, the rows that rank among its top ``len(head)`` by harm. What is checked is *which* rows
    lead, not how many stand out: a resample's median, spread and density move the head's cut (on a pronoun flip at
    5%, resampled heads held 4 to 12 rows around a 13-row head while the same rows led), and comparing whole heads
    counted that as disagreement. An empty head is checked against the resamples' heads (do they find none too)."""
    mask = head_mask(s, policy)
    if S is None or not len(s):
        return Head(int(mask.sum()), mask, None, True)
    k = int(mask.sum())
    freq = np.zeros(len(s))
    jac = []
    for sb in resampled_sums(S, policy):
        if k:
            hb = np.zeros(len(s), dtype=bool)
            hb[np.argpartition(-sb, k - 1)[:k]] = True  # O(n): only which rows are top k matters
        else:
            hb = head_mask(sb, policy)
        freq += hb
        jac.append(jaccard(mask, hb))
    freq /= max(1, int(policy.bootstrap))
    kept = mask & (freq >= policy.keep_frequency)
    stability = float(np.mean(jac)) if jac else None
    stable = stability is None or (stability >= policy.min_stability and not (mask.any() and not kept.any()))
    return Head(k, kept, stability, stable)


def harmful_findings(
    S: np.ndarray | None,
    s: np.ndarray,
    rows: Sequence[int],
    findings: Sequence[Mapping[str, Any]],
    policy: VerdictOptions,
    family: list[int] | None = None,
    *,
    on_rest: bool = False,
) -> list[FindingTest]:
    """The diagnose findings whose flagged rows carry the harm (:func:`carrying_sets` over each finding's flagged
    rows); ``on_rest`` marks the tests as read on the rest. Only findings that report a problem are tested: an info
    finding is a note on what rows have in common (a generic opening shared with the eval prompts, near duplicates),
    and rows that share it carry harm as any topic's rows do, which makes them no defect."""
    col = {int(r): j for j, r in enumerate(rows)}
    tested = []
    for f in findings:
        if is_note(f):
            continue
        fm = np.zeros(len(s), dtype=bool)
        fm[[col[r] for r in finding_train_rows(f) if r in col]] = True
        tested.append((f, fm))
    return [
        FindingTest(tested[k][0], tested[k][1], p, freq, on_rest=on_rest)
        for k, p, freq in carrying_sets(S, s, [fm for _, fm in tested], policy, family)
    ]


def is_note(f: Mapping[str, Any]) -> bool:
    """Whether a finding is an info note (what rows share) rather than a problem (a warning or an error)."""
    return str(f.get("severity") or "").lower() == Severity.INFO.value


def carrying_sets(
    S: np.ndarray | None,
    s: np.ndarray,
    masks: Sequence[np.ndarray],
    policy: VerdictOptions,
    family: list[int] | None = None,
) -> list[tuple[int, float, float | None]]:
    """Which row sets (masks over ``s``, 2 to n - 2 rows; others are not tested) carry the harm: their positive harm
    is at least ``enrichment`` x their share of the rows, and their harm ranks above the other rows'
    (:func:`rank_sum_p` under ``finding_alpha`` / the number of sets tested) in the full set and in
    ``keep_frequency`` of the resamples of the regressed items. ``family`` (a one-item counter) carries the number
    of tests across calls: each call adds its own, and its level divides by the running total (Bonferroni over every
    test of one verdict). Returns (position in ``masks``, p, share of the resamples in which the test held, None when
    not measurable) for each set that carries it."""
    if policy.finding_alpha <= 0 or not len(s):
        return []
    tested = [(k, m) for k, m in enumerate(masks) if 2 <= m.sum() <= len(s) - 2]
    family = family if family is not None else [0]
    family[0] += len(tested)
    alpha = policy.finding_alpha / max(1, family[0])
    pos = np.clip(s, 0, None)
    total = max(float(pos.sum()), 1e-300)
    ps = rank_sum_p(s, [m for _, m in tested])
    found = [
        (k, m, p)
        for (k, m), p in zip(tested, ps, strict=True)
        if p < alpha and pos[m].sum() / total >= policy.enrichment * m.sum() / len(s)
    ]
    if S is None or not found or int(policy.bootstrap) < 1:
        return [(k, p, None) for k, _, p in found]
    hits = np.zeros(len(found))
    for sb in resampled_sums(S, policy):
        hits += np.array(rank_sum_p(sb, [m for _, m, _ in found])) < alpha
    freqs = hits / int(policy.bootstrap)
    return [(k, p, float(f)) for (k, _, p), f in zip(found, freqs, strict=True) if f >= policy.keep_frequency]


def _settle(
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
    _reorder(groups, s, rows, pos_total)


def _reorder(groups: list[Group], s: np.ndarray, rows: Sequence[int], pos_total: float) -> None:
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
) -> list[Group]:
    """Split the head into mechanical groups (one per enriched mechanical finding, extended by the finding's other
    rows, whatever their harm, when ``policy.extend_mechanical``) and one content group. A mechanical
    finding in ``carriers`` (its flagged rows carry the harm: :func:`harmful_findings`) needs only two rows in the
    head: its own test is stronger evidence than its share of the head. Rows in ``grouped`` (earlier groups') are
    never added again."""

    def share(rs: Sequence[int]) -> float:
        return sum(max(0.0, score_of.get(r, 0.0)) for r in rs) / pos_total if pos_total > 0 else 0.0

    def ordered(rs: set[int]) -> list[int]:
        return sorted(rs, key=lambda r: (-score_of.get(r, 0.0), r))

    left = set(head)
    taken: set[int] = set()
    groups: list[Group] = []
    flagged = [(f, set(finding_train_rows(f))) for f in findings if finding_cause(f) == "mechanical"]
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
    _reorder(groups, s, rows, pos_total)


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
    _reorder(groups, s, rows, pos_total)


def _shared(f: Mapping[str, Any], hit: int, size: int) -> dict[str, Any]:
    """A finding as a group's shared trait: which, how many of the group's rows, its fix, and the one completion its
    rows share when its evidence names it (a label, such as D116's repeated target)."""
    target = (f.get("evidence") or {}).get("target")
    out = {"code": f.get("code"), "name": f.get("name"), "count": hit, "share": hit / size, "fix": f.get("fix")}
    return out | ({"target": str(target)} if isinstance(target, str) and target.strip() else {})
