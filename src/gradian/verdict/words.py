"""The verdict in words: the sentences, next steps, headline and evidence bullets a :class:`Decision` reads as. It
decides nothing: what the report says follows from the decision (:mod:`gradian.verdict.steps`) alone.

- **Setup errors first.** The setup errors' sentence and their config fixes lead; over a run with a setup error, rows
  that stand out are listed, not named to drop (kind ``setup``).
- **No regression / within noise.** No eval item rose beyond the fine-tune's ordinary drift
  (:mod:`gradian.attribute.regression`): the verdict says so instead of ranking noise.
- **No harm.** Items regressed, but no training row has positive harm.
- **Concentrated.** The named rows, their share of the harm, how sure, the items they drive, what dropping them
  should bring back, and a sentence per group (what its rows share), the mechanical fixes first.
- **Spread.** Why no group of rows explains the regression, what the harm leans on, what to try instead.
- **Forgetting.** When the data as a whole carries the harm, its sentence and the fix people use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from gradian.attribute.regression import by_chance_clause, describe_change
from gradian.diagnose.types import Finding, Fix, Severity
from gradian.numbers import apart, pct
from gradian.options.verdict import VerdictOptions
from gradian.verdict.culprits import Culprits, FindingTest
from gradian.verdict.decision import Decision
from gradian.verdict.driven import driven_sentence
from gradian.verdict.evidence import ClusterLike, Evidence
from gradian.verdict.finding_leads import FindingLead
from gradian.verdict.forgetting import FORGETTING_STEP, forgetting_sentence
from gradian.verdict.groups import Group
from gradian.verdict.headline import summarize
from gradian.verdict.label_leads import LabelLead
from gradian.verdict.recovery import calibrated, recovery_sentence, uncalibrated_sentence
from gradian.verdict.schema import Confidence, ConfigChange, How, Verdict, VerdictGroup, resample_size
from gradian.verdict.term_hints import TermHint

VERIFY_HINT = (
    "run gradian verify OUT_DIR (or re-run gradian attribute with --verify) to check that the regression shrinks"
)


def _rows_word(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def _join(items: Sequence[str], word: str = "and") -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {word} " + items[-1]


def _config_change(f: Finding) -> ConfigChange:
    fix = f.fix.to_dict() if f.fix is not None else None
    return ConfigChange(f.code, f.name, f.evidence.get("key"), f.evidence.get("value"), fix)


def _fix_text(fix: Fix | None) -> str:
    """A fix as one sentence (its text, and the config change when there is one)."""
    return fix.sentence() if fix is not None else ""


def _fix_sentence(f: Finding) -> str:
    ch = _config_change(f)
    where = f" (config key `{ch.key}`" + (f", now {ch.value!s}" if ch.value is not None else "") + ")"
    where = where if ch.key else ""
    fix = _fix_text(f.fix)
    return f"{f.title}{where}" + (f": {fix}" if fix else "")


@dataclass
class _Draft:
    """The verdict while it is being written: sentences and next steps accumulate in ``verdict``."""

    errors: list[Finding]
    findings: list[Finding]
    verdict: Verdict

    @property
    def sentences(self) -> list[str]:
        return self.verdict.sentences

    @property
    def next_steps(self) -> list[str]:
        return self.verdict.next_steps

    def done(self, kind: str, cause: str, headline: str, explained: Set[str] = frozenset()) -> Verdict:
        """Close the verdict: row-level errors not explained by a culprit group are still worth fixing."""
        explained = {f.code for f in self.errors} | set(explained)
        other = [f for f in self.findings if f.severity is Severity.ERROR and f.code not in explained]
        if other:
            parts = [f.title + (f" ({len(set(f.train_rows()))} rows)" if f.train_rows() else "") for f in other]
            self.sentences.append(
                f"Separately, diagnose found {_join(parts)}: "
                + ("it does" if len(other) == 1 else "they do")
                + " not explain this regression, but fix "
                + ("it" if len(other) == 1 else "them")
                + " before the next run."
            )
            for f in other:
                if f.fix is not None:
                    self.next_steps.append(f"Fix {f.title}: {_fix_text(f.fix)}.")
        self.verdict.kind, self.verdict.cause, self.verdict.headline = kind, cause, headline
        return self.verdict


def _confidence(stability: float | None, basis: str, policy: VerdictOptions) -> Confidence:
    """high at ``policy.high_stability``, medium at ``min_stability`` (what a culprit head needs), else low."""
    if stability is None:
        return Confidence(None, "unmeasured", basis)
    high, medium = policy.high_stability, policy.min_stability
    level = "high" if stability >= high else "medium" if stability >= medium else "low"
    return Confidence(round(float(stability), 4), level, basis)


def write(ev: Evidence, d: Decision, policy: VerdictOptions) -> Verdict:
    """The :class:`Verdict` of the decision ``d`` on ``ev``: its sentences, next steps, groups and rows to drop, the
    headline and evidence bullets (:mod:`gradian.verdict.headline`)."""
    errors = d.errors
    verdict = Verdict("", "", "", reliable=not errors, criterion=criterion_text(policy), policy=policy.policy(),
                      config_changes=[_config_change(f) for f in errors])  # fmt: skip
    draft = _Draft(errors, ev.findings, verdict)
    if errors:
        names = _join([f.title for f in errors])
        draft.sentences.append(
            f"Fix the setup first: {len(errors)} setup error{'s' if len(errors) > 1 else ''} ({names}) "
            f"make{'s' if len(errors) == 1 else ''} this attribution unreliable, so read the ranking below with care."
        )
        draft.next_steps.extend("Fix " + _fix_sentence(f) + "." for f in errors)
    n_reg = f"{ev.n_regressed} regressed eval item{'s' if ev.n_regressed != 1 else ''}"
    if d.kind == "no_regression":
        v = _no_regression(draft, ev.regression, d.cause)
    elif d.kind == "no_harm":
        draft.sentences.append(
            f"{n_reg[0].upper()}{n_reg[1:]} got worse, but no training row has positive harm: the data does not "
            "explain the regression."
        )
        if not errors:
            draft.next_steps.append(
                "Look at the setup findings and the loss curve; the cause is likely not in the rows."
            )
        v = draft.done("no_harm", d.cause, "No training row explains the regression.")
    else:
        v = _decided(ev, d, policy, draft, n_reg)
    summarize(v)
    return v


def _decided(ev: Evidence, d: Decision, policy: VerdictOptions, draft: _Draft, n_reg: str) -> Verdict:
    """The verdict once the culprit steps ran: setup first, concentrated or spread, then what the later steps
    found (the driven items, the expected recovery, forgetting)."""
    found = d.culprits()
    verdict = draft.verdict
    verdict.confidence = _confidence(found.stability, found.basis, policy)
    verdict.how = How.from_dict(
        found.to_dict()
        | {"head": found.head[:200], "hints": [h.to_dict() for h in d.hints], "leads": [x.to_dict() for x in d.leads],
           "finding_leads": [x.to_dict() for x in d.finding_leads]}
    )  # fmt: skip
    if d.kind == "setup":
        return _setup_first(draft, found, n_reg)
    if d.kind != "concentrated":
        v = _spread(draft, found, n_reg, d.cause, d.leads, d.finding_leads, calibrated(ev.regression))
    else:
        typed_of = {id(fd): f for fd, f in zip(ev.finding_dicts, ev.findings, strict=True)}
        v = _concentrated(draft, found, d.hints, typed_of, ev.ids, ev.n_rows, n_reg, d.cause)
        if ev.token_profiles is None and v.names_content_group:
            v.next_steps.append(TOKEN_PROFILES_HINT)
    first = 1 if v.reliable else 2  # after the sentence on the rows' share (after the setup errors' one)
    if d.driven is not None and v.how is not None:
        v.how.driven = d.driven.to_dict()
        v.sentences.insert(first, driven_sentence(d.driven))
    if d.expected_recovery is not None:
        at = min(len(v.sentences), first + (d.driven is not None))
        if d.recovery_calibrated:
            v.expected_recovery = d.expected_recovery
            v.sentences.insert(at, recovery_sentence(d.expected_recovery, len(v.drop_rows)))
        else:
            v.sentences.insert(at, uncalibrated_sentence(len(v.drop_rows)))
    if d.forgetting is not None:
        v.forgetting = d.forgetting.to_dict() | ({"recovers_little": d.recovers_little} if d.forgetting.found else {})
        if d.forgetting.found:
            v.sentences.append(forgetting_sentence(d.forgetting))
            if d.forgetting_first:
                v.next_steps.insert(0, FORGETTING_STEP)
            else:
                v.next_steps.append(FORGETTING_STEP)
    return v


def culprit_clusters(clusters: Sequence[ClusterLike], rows: Sequence[int]) -> list[int]:
    """The clusters at least half of whose rows are among ``rows`` (the named ones)."""
    named = set(rows)
    return [c.id for c in clusters if c.rows and len(named & set(c.rows)) >= 0.5 * len(c.rows)]


TOKEN_PROFILES_HINT = (
    "To let the content group also take the rows whose harm sits on its tokens (the rest of a flipped word or name "
    "whose harm alone did not stand out), re-run gradian attribute with --token-profiles 0.3 (the default): it reuses "
    "the stored gradients and adds a forward pass over the top 30% of the rows."
)


def criterion_text(policy: VerdictOptions) -> str:
    """The culprit criterion in words (report.json's ``verdict.criterion``)."""
    head_rule = (
        f"whose local false discovery rate against the bulk's empirical null is under {policy.head_fdr:g}"
        if policy.head_fdr > 0
        else f"whose harm exceeds the median by {policy.head_z:g} robust spreads"
    )
    extension = (
        f"; a content group also takes the rows with harm above the median whose gradient direction is "
        f"{policy.extend_z:g} robust spreads closer to the group's than the low-harm rows are"
        if policy.extend_z > 0
        else ""
    )
    return (
        f"culprit rows are the rows {head_rule} (at most {pct(policy.max_head_fraction)} of the rows) and stable: "
        f"they agree >= {policy.min_stability:g} (mean Jaccard) with the rows that lead {policy.bootstrap} resamples "
        f"of the regressed items{resample_size(policy.resample_items)}; a group is mechanical when a mechanical "
        f"finding flags >= {pct(policy.min_group_share)} of those rows at >= {policy.enrichment:g}x its share of the "
        f"file{extension}; the groups must carry >= {pct(policy.min_head_share)} of the positive harm, unless each "
        f"is a finding's rows the finding test below found carrying it (beside a mechanical group, each content group "
        f"must carry that share and hold >= {pct(policy.min_group_share)} of the groups' rows, and a content group "
        "of one row beside another group is no group; one that does not is set aside)"
        + (
            f"; a diagnose finding's flagged rows also make a group when their positive harm is >= "
            f"{policy.enrichment:g}x their share of the rows and their harm ranks above the other rows' (one-sided "
            f"rank-sum test, p < {policy.finding_alpha:g} / the findings tested, in >= "
            f"{pct(policy.keep_frequency)} of the resamples); what the groups explain is set aside and the other "
            "rows are read again, for a head or a finding's rows that carry their harm (every finding test under one "
            "Bonferroni level)"
            + (
                f", and on the regressed items the groups do not drive (the groups' harm on each under "
                f"{policy.driven_z:g} standard deviations above that of as many random rows), where a head counts "
                "when its rows carry the rest's harm over every item"
                if policy.driven_z > 0
                else ""
            )
            if policy.finding_alpha > 0
            else ""
        )
    )


def _no_regression(draft: _Draft, regression: Mapping[str, Any] | None, setup_cause: str) -> Verdict:
    """The verdict when no item regressed: nothing rose, or nothing rose beyond the fine-tune's drift."""
    reg = regression or {}
    if reg.get("rose"):
        scale = str(reg.get("scale", "absolute"))
        drift = (
            ""
            if reg.get("drift") is None
            else f" (the items that improved moved by {describe_change(reg['drift'], scale)})"
        )
        draft.sentences.append(
            f"{reg['rose']} eval item{'s' if reg['rose'] != 1 else ''} got worse, but by no more than the "
            f"fine-tune's ordinary drift{drift}{_by_chance(reg)}{_as_a_set(reg)}: the change is within noise, so "
            "there is no regression to attribute. If those items matter (they share a label or a skill the fine-tune "
            "should keep), the drift may be the fine-tune's purpose rather than noise: rerun gradian attribute with "
            "--noise-multiple 0 to attribute every item that rose past --threshold."
        )
        return draft.done("no_regression", setup_cause, "The change is within ordinary drift; no regression.")
    draft.sentences.append("No eval item got worse after fine-tuning, so there is no regression to attribute.")
    return draft.done("no_regression", setup_cause, "No regression to explain.")


def _by_chance(reg: Mapping[str, Any]) -> str:
    """When some items rose past the drift cut-off, but no more than as many drifting items give: why that is noise."""
    k, top = int(reg.get("beyond_drift") or 0), reg.get("top_cutoff")
    if not k or top is None:
        return ""
    scale = str(reg.get("scale", "absolute"))
    n, cut, most = (
        int(reg.get("n_items") or 0),
        describe_change(float(reg["cutoff"]), scale),
        describe_change(float(top), scale),
    )
    return (
        f": {k} rose past {reg.get('noise_multiple', 2):g} x that drift ({cut}), "
        f"{by_chance_clause(k, n, float(reg['count_p']), most)} (at {float(reg.get('family_alpha', 0.05)):.0%}); "
        "the set does not lean up"
        + ("" if reg.get("rank_p") is None else f" (signed-rank p = {float(reg['rank_p']):.2g})")
    )


def _as_a_set(reg: Mapping[str, Any]) -> str:
    """The sign test's clause, when the report recorded it: not many more items got worse than got better."""
    p = reg.get("shift_p")
    return "" if p is None else f", and not more of them than chance would give (sign test p = {float(p):.2g})"


def _tests_text(tests: Sequence[FindingTest], typed_of: Mapping[int, Finding], *, frequency: bool = False) -> str:
    """ "the N rows diagnose flags as TITLE (p = P[, in X% of the resamples])" for each finding test, joined."""

    def one(t: FindingTest) -> str:
        title = (typed_of.get(id(t.finding)) or Finding.from_dict(t.finding)).title
        held = f", in {pct(t.frequency)} of the resamples" if frequency and t.frequency is not None else ""
        return f"the {int(t.flagged.sum())} rows diagnose flags as {title} (p = {t.p:.1g}{held})"

    return _join([one(t) for t in tests])


def _read_on_rest(found: Culprits, typed_of: Mapping[int, Finding]) -> list[str]:
    """The sentence for findings read once the first groups were set aside (the confidence is the first head's)."""
    later = [t for t in found.findings if t.on_rest]
    if not later:
        return []
    tests = _tests_text(later, typed_of, frequency=True)
    return [f"With the rows that stand out set aside, {tests} rank above the other rows by harm, so they join the "
            "culprits."]  # fmt: skip


def _read_on_undriven(found: Culprits) -> list[str]:
    """The sentence for rows that stood out on the regressed items the first groups do not drive."""
    return [
        f"On the {u.items} of the {u.of_items} regressed items that the groups before them do not drive (their harm "
        f"there is under {u.z:g} standard deviations above that of as many random rows), {u.rows} of the other "
        f"rows stand out, and over every regressed item their harm ranks above the rest's (p = {u.p:.1g}), so they "
        "join the culprits: a second defect's items are outweighed by the first's in the sum."
        for u in found.undriven
    ]


def _hints(found: Culprits, hints: Sequence[TermHint]) -> tuple[list[str], list[str]]:
    """The sentence and next step for rows past the groups that hold a content group's term (:mod:`term_hints`)."""
    if not hints:
        return [], []

    def one(h: TermHint) -> str:
        whose = f"group {h.group + 1}'s rows" if len(found.groups) > 1 else "the named rows"
        held = f", in {pct(h.frequency)} of the resamples" if h.frequency is not None else ""
        return f'{_rows_word(len(h.rows))} hold "{h.term}", a term {whose} share (p = {h.p:.1g}{held})'

    n = sum(len(h.rows) for h in hints)
    sentence = (
        f"Past the named rows, {_join([one(h) for h in hints])}: as a set, their harm ranks above the other "
        "rows', so the defect may reach further than the rows named. They are not in drop_rows, since rows share a "
        "term by topic as often as by defect."
    )
    terms = _join([f'"{h.term}"' for h in hints], "or")
    step = (
        f"Read the {_rows_word(n)} that hold {terms} (listed under Rows to read, and in report.json "
        "verdict.how.hints) for the same defect, and drop those that carry it along with the named rows."
    )
    return [sentence], [step]


def _set_aside(found: Culprits, policy: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The sentences and next steps for the content groups set aside: too light or too few beside a mechanical group,
    or one row beside another group (:func:`culprits.minor`); the top of a forgetting bulk
    (:func:`forgetting.bulk_top`)."""
    top = [g for g in found.set_aside if g.aside == "bulk"]
    light = [g for g in found.set_aside if g.aside != "bulk"]
    sentences, steps = _minor_aside(light, found, policy)
    if top:
        n = sum(len(g.rows) for g in top)
        sentences.append(
            f"Beside the named rows, {_rows_word(n)} that no finding or label describes also stand out "
            f"({pct(sum(g.harm_share for g in top))} of the harm). The model forgot (below): they are read as the rows "
            "forgetting's harm is heaviest on, not as a defect of their own, so they are not in drop_rows."
        )
        steps.append(
            f"Read the {_rows_word(n)} set aside as the bulk's top (listed under Rows to read, and in report.json "
            "verdict.how.set_aside): the forgetting fix is the one for them."
        )
    return sentences, steps


def _minor_aside(light: list[Group], found: Culprits, policy: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    if not light:
        return [], []
    n = sum(len(g.rows) for g in light)
    share = sum(g.harm_share for g in light)
    min_share = float(policy.get("min_head_share") or 0.0)
    got, need = apart(share, min_share, percent=True)
    why = (
        f"they carry {got} of the harm, under the {need} a group of its own needs"
        if share < min_share
        else f"they carry {pct(share)} of the harm, but are too few for a group of their own (under "
        f"{pct(float(policy.get('min_group_share') or 0.0))} of the rows the groups hold)"
    )
    beside = "the mechanical group" if any(g.cause == "mechanical" for g in found.groups) else "the named rows"
    sentence = (
        f"Beside {beside}, {_rows_word(n)} that no finding flags also stand out, but {why}. They likely "
        "lead a few regressed items beside the defect rather than make a second one, so they are not in drop_rows."
    )
    step = (
        f"Read the {_rows_word(n)} set aside beside {beside} (listed under Rows to read, and in "
        "report.json verdict.how.set_aside) once the named rows are fixed, if some regressed items stay worse."
    )
    return [sentence], [step]


def _tokens_text(vg: VerdictGroup, share: float) -> list[str]:
    """The tokens a content group's harm sits on, and why they added no rows when they are what the rows are
    (``share``: the policy's ``token_share``)."""
    if not vg.tokens:
        return []
    said = f"Most of their harm sits on the token{'s' if len(vg.tokens) > 1 else ''} " + " / ".join(
        repr(t) for t in vg.tokens
    )
    it = "them" if len(vg.tokens) > 1 else "it"
    one = len(vg.off_tokens) == 1
    their, they_lead, they_are = ("its", "it leads", "it is") if one else ("their", "they lead", "they are")
    off = (
        [
            f"{_rows_word(len(vg.off_tokens)).capitalize()} that stood out beside them put none of {their} harm on "
            f"{it}: {they_lead} other items, not this defect, so {they_are} not named (report.json "
            "groups[].off_tokens)."
        ]
        if vg.off_tokens
        else []
    )
    if vg.token_hold is not None and vg.token_hold >= share:
        return [
            f"{said}, and {pct(vg.token_hold)} of the rows that hold {it} put their harm there too: the tokens mark "
            f"what these rows are (a label, or a name only they hold), so no row joined by {it}.",
            *off,
        ]
    return [said + ".", *off]


def _describe_groups(
    draft: _Draft, groups: Sequence[tuple[Group, VerdictGroup]], typed_of: Mapping[int, Finding], share: float
) -> tuple[set[str], list[str]]:
    """A sentence per group (its cause and what its rows share; ``share``: the policy's ``token_share``); returns the
    finding codes that explain groups and the fixes of the mechanical ones."""
    explained: set[str] = set()
    fixes: list[str] = []
    for i, (g, vg) in enumerate(groups, start=1):
        who = f"Group {i} ({_rows_word(len(vg.rows))}, {pct(vg.harm_share)} of the harm)" if len(groups) > 1 else ""
        if vg.cause == "mechanical" and g.finding is not None:
            main = typed_of.get(id(g.finding)) or Finding.from_dict(g.finding)
            also = [sh for sh in vg.shared if sh.code != main.code]
            explained |= {main.code} | {str(sh.code) for sh in also}
            names = _join([main.title] + [sh.title for sh in also])
            draft.sentences.append(
                (f"{who} looks mechanical" if who else "The cause looks mechanical")
                + f": diagnose flags {'them' if who else 'these rows'} as {names}."
            )
            traits = [(main.title, main.fix)] + [(sh.title, Fix.from_dict(sh.fix) if sh.fix else None) for sh in also]
            for title, fix in traits:
                step = f"Fix {title}: {_fix_text(fix)}." if fix is not None else ""
                if step and step not in fixes:
                    fixes.append(step)
            continue
        about = f" (rows about {' / '.join(vg.terms)})" if vg.terms else ""
        draft.sentences.append(
            (f"{who} carries" if who else "They carry")
            + f" no mechanical setup finding, so the cause looks like content{about}."
        )
        draft.sentences.extend(_tokens_text(vg, share))
        for sh in vg.shared:
            draft.sentences.append(
                f"What they have in common: {100 * sh.share:.0f}% of them are flagged by diagnose as {sh.title}."
            )
            explained.add(str(sh.code))
        if vg.label:
            most = "They share" if (vg.label_share or 0) >= 1 else f"{pct(vg.label_share)} of them share"
            draft.sentences.append(
                f"{most} the completion {vg.label!r}: the harm comes from what that label teaches. Gradients cannot "
                "tell a wrongly labelled row from a rightly labelled one of the same label (their directions agree; "
                "wrong ones only tend to rank higher), so some of these rows may be right."
            )
    return explained, fixes


def _drop_steps(head: Sequence[int], groups: Sequence[tuple[Group, VerdictGroup]]) -> list[str]:
    """What to do with the named rows: drop them, or, for a group that is one label's rows, check its labels first
    (dropping them all would take the label out of the data)."""
    drop = f"Drop the {_rows_word(len(head))} (listed in drop_rows.txt / drop_rows.json), re-train, and {VERIFY_HINT}."
    labels = [vg for _, vg in groups if vg.label]
    if not labels:
        return [drop]
    return [
        f"Check the labels of the {_rows_word(round((vg.label_share or 0) * len(vg.rows)))} whose completion is "
        f"{vg.label!r} (in drop_rows.txt, most harmful first: wrong labels tend to rank first), and relabel or drop "
        f"the wrong ones before re-training. Dropping all of them takes {vg.label!r} out of the data; gradian verify "
        "reports what that costs the eval items that had not regressed."
        for vg in labels
    ] + ["Or " + drop[0].lower() + drop[1:]]


def _concentrated(
    draft: _Draft,
    found: Culprits,
    hints: Sequence[TermHint],
    typed_of: Mapping[int, Finding],
    ids: Mapping[int, Any],
    n_rows: int,
    n_reg: str,
    cause: str,
) -> Verdict:
    """The verdict when culprit rows were found: the rows, their groups, the cause, how sure."""
    v = draft.verdict
    head = found.head
    groups = [(g, VerdictGroup.from_dict(g.to_dict())) for g in found.groups]
    joined = sum(vg.by_direction for _, vg in groups)
    by_tok = sum(vg.by_tokens for _, vg in groups)
    by_find = sum(vg.by_finding for _, vg in groups)
    ways = (
        ([f"{joined} joined because their gradient points the way the group's does"] if joined else [])
        + ([f"{by_tok} joined because their harm sits on the group's tokens"] if by_tok else [])
        + ([f"{by_find} joined because the finding that describes the group flags them too"] if by_find else [])
    )
    by_dir = f" ({'; '.join(ways)})" if ways else ""
    share = (
        f"{_rows_word(len(head)).capitalize()} ({pct(len(head) / n_rows if n_rows else 0)} of the training data) "
        f"carry {pct(found.head_share)} of the harm to the {n_reg}."
    )
    if found.basis == "finding":
        tests = _tests_text(found.findings, typed_of)
        least = "" if len(found.findings) == 1 else "at least "
        held = (
            f" in {least}{pct(v.confidence.stability)} of the resamples of the regressed items"
            if v.confidence.stability is not None
            else ""
        )
        alone = (
            "No single row's harm stands out"
            if not found.raw_head
            else f"The {found.raw_head} rows whose harm stands out on its own change when the regressed items are "
            "resampled"
        )
        joined_text = f"; of the rows, {'; '.join(ways)}" if ways else ""
        draft.sentences.append(
            f"{share} {alone}, but {tests} rank above the other rows by harm{held} "
            f"(confidence: {v.confidence.level}){joined_text}."
        )
    else:
        sure = {
            "high": "resampling the regressed items finds the same rows (confidence: high",
            "medium": "resampling the regressed items mostly finds the same rows (confidence: medium",
            "low": "resampling the regressed items often finds other rows (confidence: low",
            "unmeasured": "too few items regressed to resample them (confidence: unmeasured",
        }[v.confidence.level]
        agree = f", agreement {v.confidence.stability:.2f})" if v.confidence.stability is not None else ")"
        draft.sentences.append(f"{share} Their harm stands out from the other rows{by_dir}, and {sure}{agree}.")
        draft.sentences.extend(_read_on_rest(found, typed_of))
    draft.sentences.extend(_read_on_undriven(found))
    explained, fixes = _describe_groups(draft, groups, typed_of, float(v.policy.get("token_share") or 0.0))
    hint_sentences, hint_steps = _hints(found, hints)
    aside_sentences, aside_steps = _set_aside(found, v.policy)
    draft.sentences.extend(hint_sentences + aside_sentences)
    draft.next_steps.extend(fixes)  # a mechanical cause is fixed first
    draft.next_steps.extend(_drop_steps(head, groups))
    draft.next_steps.extend(hint_steps + aside_steps)
    for _, vg in groups:
        for sh in vg.shared if vg.cause == "content" else ():
            if sh.fix:
                draft.next_steps.append(f"Fix {sh.title}: {_fix_text(Fix.from_dict(sh.fix))}.")
    v.groups = [vg for _, vg in groups]
    v.drop_rows = list(head)
    v.drop_ids = [ids.get(r) for r in head]
    headline = f"{_rows_word(len(head)).capitalize()} carry {pct(found.head_share)} of the estimated harm ({cause})."
    return draft.done("concentrated", cause, headline, explained)


def _setup_first(draft: _Draft, found: Culprits, n_reg: str) -> Verdict:
    """The verdict when rows stand out but a setup error makes the run unreliable: say which rows, name none. A broken
    run's harm is no evidence against its rows (mislabel's file with every label right, trained for 12 epochs, puts
    a third to two thirds of the harm on one label's rows, stably: CHANGELOG.md, the label controls), and dropping
    rows from a run that is re-trained with the fix tests nothing."""
    draft.sentences.append(
        f"On this run {_rows_word(len(found.head))} stand out and carry {pct(found.head_share)} of the harm to the "
        f"{n_reg}, but over a run with a setup error that is no evidence against them, so none are named to drop "
        "(they are listed in verdict.how.head)."
    )
    draft.next_steps.append(
        "Re-train with the setup fixed and run gradian attribute again: if the regression stays, the rows that stand "
        "out then are the ones to check."
    )
    return draft.done("setup", "setup", "Fix the setup first; no rows are named over a broken run.")


# A spread verdict does not prove that no rows are to blame: on 15 of the 108 spread verdicts over the planted-fault
# suite and its held-out sets, retraining without the planted rows removed most of the regression (docs/benchmarks.md,
# the planted-fault suite), so the last step says where such a defect shows.
SPREAD_THIN = (
    "If the regressed items share a word or an answer the fine-tune now gets wrong (Base vs fine-tune), read the "
    "training rows that hold it: a defect spread thin over many topics can sit under what the ranking singles out."
)


def _spread(draft: _Draft, found: Culprits, n_reg: str, setup_cause: str, leads: Sequence[LabelLead] = (),
            flagged: Sequence[FindingLead] = (), recovery_calibrated: bool = True) -> Verdict:  # fmt: skip
    """The verdict when no group of rows explains the regression: say why, what the harm leans on (one label's rows,
    :mod:`label_leads`; a warning's rows, :mod:`finding_leads`; what dropping those brings back where
    ``recovery_calibrated``), and what to try instead."""
    draft.sentences.append(
        f"The harm to the {n_reg} is spread: {found.reason}. No group of rows explains the regression, so no rows "
        "are named to drop."
    )
    for lead in leads:
        freq = "" if lead.frequency is None else f", in {lead.frequency:.0%} of the resamples"
        draft.sentences.append(
            f"It leans on one label, though: the {len(lead.rows)} rows whose completion is {lead.label!r} "
            f"({pct(lead.row_share)} of the scored rows) carry {pct(lead.harm_share)} of the harm, and as a set their "
            f"harm ranks above the other rows' (p = {lead.p:.1g}{freq}). Gradients cannot tell a wrongly labelled row "
            "from a rightly labelled one of the same label (they point the same way): if some of these rows are "
            "mislabelled, this is how it looks; if every one is right, it is that label's own pull on these items."
        )
    draft.next_steps.extend(
        f"Check the labels of the {len(lead.rows)} rows whose completion is {lead.label!r} (listed in "
        "verdict.how.leads, most harmful first: wrong labels tend to rank first), relabel the wrong ones and re-train: "
        "if they were the cause, the regressed items come back. Dropping them all would take the label out of the data."
        for lead in leads
    )
    for fl in flagged:
        freq = "" if fl.frequency is None else f", in {fl.frequency:.0%} of the resamples"
        back = (
            f"dropping them should bring back about {pct(fl.expected_recovery)} of it (their share of the harm, "
            "calibrated on retrains)"
            if recovery_calibrated
            else "what dropping them brings back is not estimated on a regression scored by preference"
        )
        draft.sentences.append(
            f"It leans on the {_rows_word(len(fl.rows))} diagnose flags as {fl.title}, though: they are "
            f"{pct(fl.row_share)} of the scored rows and carry {pct(fl.harm_share)} of the harm, and as a set their "
            f"harm ranks above the other rows' (p = {fl.p:.1g}{freq}). Too little to explain the regression; {back}."
        )
    draft.next_steps.extend(
        f"{fl.fix.rstrip('.') or 'Fix the rows'} (the {_rows_word(len(fl.rows))} flagged as {fl.title}, listed in "
        "verdict.how.finding_leads, most harmful first)"
        + (
            f": dropping them should bring back about {pct(fl.expected_recovery)} of the regression."
            if recovery_calibrated
            else "."
        )  # fmt: skip
        for fl in flagged
    )
    warn = [] if draft.errors else [f for f in draft.findings if f.severity is Severity.WARNING and not f.train_rows()]
    if warn:
        draft.next_steps.append(
            "Check the setup warnings (" + _join([f.title for f in warn]) + "): a regression spread "
            "over all the data often comes from how it was trained (learning rate, epochs) rather than from rows."
        )
    if not draft.errors and not warn:
        draft.next_steps.append(
            ("If those labels are right, no rows stand out to drop" if leads else "No rows stand out to drop")
            + "; try a lower learning rate or fewer epochs, or mix in data like the regressed eval items."
        )  # fmt: skip
        draft.next_steps.append(SPREAD_THIN)
    return draft.done("spread", setup_cause, "The harm is spread; no group of rows stands out.")
