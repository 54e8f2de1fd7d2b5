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
   that the finding test (step 4) found carrying the harm (a mechanical group it makes, or a content group it
   describes, :func:`rests_on_finding`): that test already weighs their harm against their share of
   the rows, and the bulk's positive harm grows with the file, so a fixed share would call a defect in 5% of 1,200
   rows that carries 3x its share of the harm spread.
3. **Groups.** The head rows are grouped by what they share: a *mechanical* diagnose finding (one that declares how
   rows became tokens: truncation, EOS, cut completions, loops) that flags a sizeable part of the head and is enriched
   there (its share of the head is at least ``enrichment`` x its share of the file) makes a mechanical group; the
   remaining head rows form a content group, described by their distinctive terms and by the content findings that
   flag at least ``flag_share`` of them; such a finding whose rows carry the harm (step 4) adds its other rows
   (``extend_content``), as a mechanical group takes its finding's.
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

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gradian.diagnose.types import Severity
from gradian.numbers import apart
from gradian.options.verdict import VerdictOptions
from gradian.verdict.driven import driven_items
from gradian.verdict.groups import Group, RowTerms, describing, finding_cause, group_rows, settle
from gradian.verdict.stats import jaccard, local_fdr, rank_sum_p, resampled_sums, robust
from gradian.verdict.terms import finding_train_rows


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
    set_aside: list[Group] = field(default_factory=list)  # content groups too light or too few beside another (minor)

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


def minor(groups: list[Group], policy: VerdictOptions) -> tuple[list[Group], list[Group]]:
    """(groups to name, content groups set aside). Beside a mechanical group, a content group is set aside when it
    carries under ``min_head_share`` of the positive harm, or holds fewer than ``min_group_share`` of the groups' rows
    once its rows that point the mechanical group's way have moved there. The finding names the defect's rows; head
    rows it does not flag, too light or too few to be a group on their own, lead some items beside the defect. (Head
    rows too few for a content group in the first place ride along in the mechanical group, :func:`group_rows`: they
    are as often rows the finding missed.) On the planted-fault suite and both held-out sets every second defect's
    group carries over a quarter of the harm, and the 29 rows set aside in 6 runs hold no planted row
    (CHANGELOG.md, the planted-fault suite). Likewise a content group of one row beside another group. A group under
    ``min_head_share`` beside a content group stays named: on a real chat model the planted refusals carry 15% of the
    harm beside forgetting's 23%, and on the planted-fault suite a second, mechanical defect found on the rest
    carries under a fifth of it."""
    few = max(2, policy.min_group_share * sum(len(g.rows) for g in groups))
    mechanical = any(g.cause == "mechanical" for g in groups)
    named: list[Group] = []
    light: list[Group] = []
    for g in groups:
        alone = len(g.rows) < 2 and len(groups) > 1  # one row beside a group is no group of its own
        lt = g.harm_share < policy.min_head_share
        minor_group = g.cause == "content" and ((mechanical and (lt or len(g.rows) < few)) or alone)
        (light if minor_group else named).append(g)
    return named, light


@dataclass
class Reading:
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
    nested: set[str] = field(default_factory=set)  # findings whose harm a narrower finding's rows carry

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
        self, mask: np.ndarray, carriers: Sequence[Mapping[str, Any]], groups: Sequence[Group] = (), *, settled: bool
    ) -> list[Group]:
        """``groups`` and new groups of the rows in ``mask`` (:func:`group_rows`), settled together when ``settled``
        (:func:`settle`: the extension step)."""
        grouped = {x for g in groups for x in g.rows}
        out = list(groups) + group_rows(
            self.ranked(mask), self.score_of, self.pos_total, self.findings, self.terms, len(self.rows), self.policy,
            carriers, grouped, self.nested,
        )  # fmt: skip
        if settled:
            self.settle(out)
        return out

    def settle(self, groups: list[Group]) -> None:
        settle(groups, self.emb, self.s, self.rows, self.pos_total, self.policy)


def explain_away(
    rd: Reading,
    groups: list[Group],
    harmful: list[FindingTest],
    carriers: list[Mapping[str, Any]],
    *,
    settled: bool = True,
) -> list[UndrivenRead]:
    """Set aside what the groups explain and read the rest again, until nothing more is found (step 6 of the module
    doc): for a head of its own, on every item and on the items no group drives, and for findings whose rows carry
    the rest's harm (a second defect's share of all harm is diluted by the first). ``groups``, ``harmful`` and
    ``carriers`` grow in place; ``settled``: the groups are settled (:func:`settle`) each round. Returns the heads
    found on the undriven items."""
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
        new = [t for t in harmful_findings(S_rest, s[rest], rest_rows, rd.findings, policy, rd.family, on_rest=True,
                                           nested=rd.nested)
               if not any(t.finding is c for c in carriers)]  # fmt: skip
        for t in new:
            more[at[t.flagged & rd.above[rest]]] = True
        if not more.any():
            break
        harmful += new
        carriers += [t.finding for t in new]
        read |= set(rd.ranked(more))
        groups[:] = rd.group(more, carriers, groups, settled=settled)
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


def concentration(
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
    by_findings = grouped and all(rests_on_finding(g, carriers) for g in groups)
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


def rests_on_finding(g: Group, carriers: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a group is a carrying finding's rows: a mechanical group made by one, or a content group that one
    describes (flags at least ``flag_share`` of it) and, with ``extend_content``, took every row of."""
    if g.cause == "mechanical":
        return any(g.finding is f for f in carriers)
    return bool(describing(g, carriers))


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
    nested: set[str] | None = None,
) -> list[FindingTest]:
    """The diagnose findings whose flagged rows carry the harm (:func:`carrying_sets` over each finding's flagged
    rows); ``on_rest`` marks the tests as read on the rest. Only findings that report a problem are tested: an info
    finding is a note on what rows have in common (a generic opening shared with the eval prompts, near duplicates),
    and rows that share it carry harm as any topic's rows do, which makes them no defect."""
    col = {int(r): j for j, r in enumerate(rows)}
    tested = []
    for f in findings:
        if is_note(f) or (nested is not None and str(f.get("code")) in nested):
            continue
        fm = np.zeros(len(s), dtype=bool)
        fm[[col[r] for r in finding_train_rows(f) if r in col]] = True
        tested.append((f, fm))
    found = [
        FindingTest(tested[k][0], tested[k][1], p, freq, on_rest=on_rest)
        for k, p, freq in carrying_sets(S, s, [fm for _, fm in tested], policy, family)
    ]
    out = [t for t in found if not _explained_by_narrower(t, found, S, s, policy, family)]
    if nested is not None:  # read on the rest, their other rows would stand for the narrower finding's defect
        nested |= {str(t.finding.get("code")) for t in found if t not in out}
    return out


def _explained_by_narrower(
    t: FindingTest, found: Sequence[FindingTest], S: np.ndarray | None, s: np.ndarray, policy: VerdictOptions,
    family: list[int] | None,
) -> bool:  # fmt: skip
    """Whether a carrying mechanical finding's harm is a narrower carrying content finding's: one that flags no more
    rows, at least ``flag_share`` of them among ``t``'s, while ``t``'s other rows do not carry the harm on their own
    (refusals are short answers too: "short answer" carries the harm only through the refusals; on the same rows
    the content finding still says what they are). A mechanical finding whose fix is a training setting (its
    evidence names the key: rows cut at max_length) yields only to a strictly narrower one: on the very same rows
    the setting stays the cause, the content finding what the rows share. Two mechanical findings on the same rows
    describe one defect (loops cut by truncation): they are grouped together instead."""
    if finding_cause(t.finding) != "mechanical":
        return False
    for n in found:
        inner = int((n.flagged & t.flagged).sum())
        if n is t or finding_cause(n.finding) != "content" or n.flagged.sum() > t.flagged.sum():
            continue
        if (t.finding.get("evidence") or {}).get("key") and np.array_equal(n.flagged, t.flagged):
            continue
        if inner < policy.flag_share * n.flagged.sum():
            continue
        if not carrying_sets(S, s, [t.flagged & ~n.flagged], policy, family):
            return True
    return False


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
