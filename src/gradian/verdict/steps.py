"""The verdict's decision as an ordered list of named steps (:data:`STEPS`). Each step reads the :class:`Evidence`
and refines one :class:`Decision`; ``VerdictOptions.skip`` switches steps off (for ablations). In order:

- ``regression``: no regressed item, or no row with positive harm, ends the decision (no_regression, no_harm).
- ``head``: the rows whose harm stands out from the bulk and stay the leaders when the regressed items are resampled.
- ``findings``: the rows of each diagnose finding that reports a problem are tested as a set: when they carry the
  harm, those with harm above the median join the head (the findings join).
- ``groups``: the head split by what its rows share: a mechanical finding's rows, the rest one content group (with
  the other rows of a carrying content finding that describes it).
- ``extension``: each content group takes the rows whose gradient points its way; a small mechanical group joins the
  largest one.
- ``explain_away``: what the groups hold is set aside and the rest read again (its own head, the regressed items the
  groups do not drive, the findings that carry the rest's harm): a second defect.
- ``share``: beside a mechanical group, a light content group is set aside (listed, not named); the groups
  name rows only when they carry enough of the harm (or rest on finding tests) and are stable.
- ``tokens``: with token profiles, each named content group takes the rows whose harm sits on its tokens.
- ``describe``: each content group's findings, label and distinctive terms, read on its final rows; the rows
  outside the groups that hold a group's term and carry the harm (hints); a spread harm that leans on one label's
  rows (leads).
- ``setup_first``: over a run with a setup error, rows that stand out are listed, not named.
- ``effect``: the regressed items the named rows drive (the items `gradian verify` judges them on) and the
  share of the summed regression dropping them should bring back.
- ``forgetting``: the rows not named carry most of the harm and the regressed items are unlike the training rows;
  then, beside a group a finding describes, a group nothing describes is forgetting's top: set aside.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gradian.attribute.token_profiles import TokenProfiles
from gradian.diagnose.types import Finding, Severity
from gradian.options.verdict import STEP_NAMES, VerdictOptions
from gradian.verdict.culprits import (
    Culprits,
    Head,
    Reading,
    concentration,
    explain_away,
    harmful_findings,
    minor,
    stable_head,
)
from gradian.verdict.decision import Decision
from gradian.verdict.driven import driven_items
from gradian.verdict.evidence import Evidence, Row, typed_findings
from gradian.verdict.finding_leads import finding_leads
from gradian.verdict.forgetting import bulk_top, forgetting
from gradian.verdict.groups import describe_content, reorder
from gradian.verdict.harm_tokens import extend_by_tokens
from gradian.verdict.label_leads import label_leads
from gradian.verdict.recovery import calibrated, expected_recovery
from gradian.verdict.term_hints import term_hints


def setup_errors(
    findings: Sequence[Finding | Mapping[str, Any]], n_rows: int, policy: VerdictOptions | None = None
) -> list[Finding]:
    """ERROR findings that make attribution unreliable: config/log errors (no rows), or row errors covering at least
    ``setup_row_share`` of the training rows."""
    share = (policy or VerdictOptions()).setup_row_share
    out = []
    for f in typed_findings(findings):
        if f.severity is not Severity.ERROR:
            continue
        rows = f.train_rows()
        has_rows = bool(rows) or bool(f.evidence.get("rows"))
        if not has_rows or (n_rows and len(set(rows)) >= share * n_rows):
            out.append(f)
    return out


def regression(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    if not ev.n_regressed:
        d.kind, d.stopped = "no_regression", True
    elif float(ev.scores[ev.scores > 0].sum()) <= 0:
        d.kind, d.stopped = "no_harm", True


def head(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    d.head = stable_head(d.rd.S, d.rd.s, o)
    d.stability, d.basis = d.head.stability, "head"


def no_head(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    d.head = Head(0, np.zeros(len(d.rd.s), dtype=bool), None, True)


def findings(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    rd = d.rd
    d.harmful = harmful_findings(rd.S, rd.s, rd.rows, rd.findings, o, rd.family, nested=rd.nested)
    d.seeded = np.logical_or.reduce([t.flagged for t in d.harmful], initial=False) & rd.above


def groups(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    rd, h = d.rd, _head(d)
    seeded = d.seeded if d.seeded is not None else np.zeros(len(rd.s), dtype=bool)
    if h.stable and h.kept.any():
        d.groups = rd.group(h.kept | seeded, d.carriers, settled=False)
    elif seeded.any():  # no head stands out, but the rows a finding flags carry the harm
        d.groups = rd.group(seeded, d.carriers, settled=False)
        freqs = [t.frequency for t in d.harmful if t.frequency is not None]
        d.stability, d.basis = (min(freqs) if freqs else None), "finding"


def extension(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    if d.groups:
        d.rd.settle(d.groups)


def explain(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    d.undriven = explain_away(d.rd, d.groups, d.harmful, d.carriers, settled=o.runs("extension"))


def share(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    """Beside a mechanical group, a light content group is set aside (listed, not named); the groups left name rows
    when they carry enough of the harm and are stable."""
    d.groups, d.set_aside = minor(d.groups, o)
    h = _head(d)
    d.culprit_rows, d.head_share = d.rd.named(d.groups, h.kept)
    d.concentrated, d.reason = concentration(h, d.groups, d.culprit_rows, d.head_share, d.harmful, d.basis, o)
    _settle_kind(d)


def no_share(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    """Without the share and stability bars: whatever rows the groups (or the head) hold are named."""
    d.culprit_rows, d.head_share = d.rd.named(d.groups, _head(d).kept)
    d.concentrated = bool(d.culprit_rows)
    d.reason = f"{len(d.culprit_rows)} rows stand out" if d.concentrated else "no row's harm stands out"
    _settle_kind(d)


def _settle_kind(d: Decision) -> None:
    if not d.concentrated:
        h = _head(d)
        d.groups, d.undriven, d.set_aside = [], [], []
        d.stability, d.basis = h.stability, "head"
    d.kind = "concentrated" if d.concentrated else "spread"


def tokens(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    """Each named content group takes the rows whose harm sits on its tokens; the tokens never undo the decision."""
    rd, profiles = d.rd, ev.token_profiles
    if not (d.concentrated and d.groups and profiles is not None):
        return
    before = [replace(g, rows=list(g.rows)) for g in d.groups]
    extend_by_tokens(d.groups, profiles, rd.s, rd.rows, o.token_share, [r for g in d.set_aside for r in g.rows])
    reorder(d.groups, rd.s, rd.rows, rd.pos_total)
    named_groups, lighter = minor(d.groups, o)  # rows that left by their tokens can leave a group too light
    named, part = rd.named(named_groups, _head(d).kept)
    still, why = concentration(_head(d), named_groups, named, part, d.harmful, d.basis, o)
    if still:
        d.groups, d.culprit_rows, d.head_share, d.reason = named_groups, named, part, why
        d.set_aside += lighter
    else:
        d.groups = before


def describe(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    """What a content group shares (findings, label, terms, read on its final rows); the rows outside the groups that
    hold a group's term and carry the harm (hints); on a spread harm, the label and the warnings' rows its harm leans
    on (leads)."""
    for g in d.groups + d.set_aside:  # rows joined or left by direction or tokens: what a content group shares
        if g.cause == "content":
            describe_content(g, d.rd.findings, d.rd.terms, o)
    if d.concentrated:
        d.hints = term_hints(ev.S, d.rd.s, d.rd.rows, d.groups, ev.texts, o, [d.rd.family[0]])
    else:
        family = [d.rd.family[0]]  # both lead tests count in the verdict's one Bonferroni family
        d.leads = label_leads(ev.S, d.rd.s, d.rd.rows, ev.labels, o, family)
        d.finding_leads = finding_leads(ev.S, d.rd.s, d.rd.rows, d.rd.findings, o, ev.harm, family)


def setup_first(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    """A broken run's harm is no evidence against its rows: rows that stand out are listed, none named."""
    if d.concentrated and d.errors:
        d.kind = "setup"


def effect(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    """What dropping the named rows should do: the regressed items they drive (the ones `gradian verify` judges them
    on) and the share of the summed regression it should bring back."""
    if not (d.kind == "concentrated" and d.drop_rows):
        return
    ih = ev.item_harm
    if ih is not None:
        d.driven = driven_items(ih.S, ih.items, ih.rows, d.drop_rows, z=o.driven_z, alpha=o.driven_alpha)
    d.expected_recovery = round(expected_recovery(ev.harm, d.drop_rows, o.recovery_per_harm_share), 3)
    d.recovery_calibrated = calibrated(ev.regression)


def forgot(ev: Evidence, d: Decision, o: VerdictOptions) -> None:
    """Whether the model forgot; when it did, a group nothing describes beside one that a finding does is the bulk's
    top (:func:`gradian.verdict.forgetting.bulk_top`): set aside, and the named rows' effect read again."""
    if d.kind not in ("concentrated", "spread"):
        return
    d.forgetting = forgetting(ev.harm, d.drop_rows, ev.item_texts, ev.texts or {}, o)
    top = bulk_top(d.groups) if d.forgetting is not None and d.forgetting.found and d.kind == "concentrated" else []
    if top:
        for g in top:
            g.aside = "bulk"
        d.groups = [g for g in d.groups if g not in top]
        d.set_aside += top
        d.culprit_rows, d.head_share = d.rd.named(d.groups, _head(d).kept)
        d.hints = term_hints(ev.S, d.rd.s, d.rd.rows, d.groups, ev.texts, o, [d.rd.family[0]])
        n_top = sum(len(g.rows) for g in top)
        d.reason = (f"{len(d.culprit_rows)} rows stand out and carry {d.head_share:.0%} of the harm; {n_top} rows of "
                    "the bulk that also stand out are forgetting's top, set aside")  # fmt: skip
        effect(ev, d, o)
        d.forgetting = forgetting(ev.harm, d.drop_rows, ev.item_texts, ev.texts or {}, o)
    if d.forgetting is not None and d.forgetting.found:
        d.recovers_little = (d.expected_recovery or 0.0) < o.forgetting_leads_below  # dropping the rows: little
        d.forgetting_first = (d.kind == "spread" or d.recovers_little) and not d.errors  # a setup error's fix first


def _head(d: Decision) -> Head:
    if d.head is None:
        d.head = Head(0, np.zeros(len(d.rd.s), dtype=bool), None, True)
    return d.head


StepFn = Callable[[Evidence, Decision, VerdictOptions], None]


@dataclass(frozen=True)
class Step:
    """A named step; ``off`` is what stands in for it when it is switched off (nothing, when None)."""

    name: str
    run: StepFn
    off: StepFn | None = None


STEPS: tuple[Step, ...] = (
    Step("regression", regression),
    Step("head", head, no_head),
    Step("findings", findings),
    Step("groups", groups),
    Step("extension", extension),
    Step("explain_away", explain),
    Step("share", share, no_share),
    Step("tokens", tokens),
    Step("describe", describe),
    Step("setup_first", setup_first),
    Step("effect", effect),
    Step("forgetting", forgot),
)
assert tuple(s.name for s in STEPS) == STEP_NAMES, "VerdictOptions.skip names the steps of STEPS"
CULPRIT_STEPS = ("head", "findings", "groups", "extension", "explain_away", "share", "tokens", "describe")


def reading(ev: Evidence, o: VerdictOptions) -> Reading:
    """What every culprit test reads: the harm (the per-item harm only when there are enough items to resample), the
    rows, the findings, the gradient directions (when groups extend along them) and the Bonferroni family."""
    s, S = ev.scores, ev.S
    if S is not None and not (S.ndim == 2 and S.shape[1] == len(s) and S.shape[0] >= o.min_items_for_stability):
        S = None
    emb = None if ev.embeddings is None or o.extend_z <= 0 else ev.embeddings
    return Reading(S, s, list(ev.index), ev.finding_dicts, ev.texts, emb, o, ev.labels)


def decide(
    ev: Evidence,
    options: VerdictOptions | None = None,
    *,
    resume: Decision | None = None,
    stop: str | None = None,
    only: Sequence[str] = STEP_NAMES,
) -> Decision:
    """Run the steps on ``ev`` in order (those in ``only`` and not in ``options.skip``), from the start or from where
    ``resume`` (a decision an earlier call stopped) was left, up to ``stop`` (that step is not run)."""
    o = options or VerdictOptions()
    d = resume if resume is not None else Decision(reading(ev, o), setup_errors(ev.findings, ev.n_rows, o))
    done = {s.name for s in STEPS[: d.at]}
    for i, step in enumerate(STEPS):
        if step.name in done:
            continue
        if step.name == stop or d.stopped:
            break
        d.at = i + 1
        if step.name not in only:
            continue
        fn = step.run if o.runs(step.name) else step.off
        if fn is not None:
            fn(ev, d, o)
    if not d.stopped and d.at == len(STEPS):
        d.cause = cause_of(d)
    elif d.stopped:
        d.cause = "setup" if d.errors else "unknown"
    return d


def cause_of(d: Decision) -> str:
    """The cause a decided verdict names: its groups' causes for a concentrated one; ``forgetting`` for a spread one
    the data causes as a whole; ``setup`` over a setup error; else unknown."""
    if d.kind == "concentrated":
        causes = {g.cause for g in d.groups}
        return "mechanical+content" if len(causes) > 1 else (causes.pop() if causes else "content")
    if d.kind == "setup" or d.errors:
        return "setup"
    return "forgetting" if d.kind == "spread" and d.forgetting is not None and d.forgetting.found else "unknown"


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
    """The culprit steps alone (``head`` to ``describe``) on plain arrays: ``scores[j]`` is the harm of training row
    ``rows[j]``; ``item_scores`` (regressed items x rows, same column order) adds the stability check; ``embeddings``
    (rows x k, same order) and ``token_profiles`` extend the groups; ``labels`` (row -> its completion, when short
    enough to be a label) tell a group whose rows share one."""
    o = policy or VerdictOptions()
    s = np.asarray(scores, dtype=np.float64)
    n_items = 0 if item_scores is None else int(np.shape(item_scores)[0])
    labels = labels or {}
    ev = Evidence([Row(int(r), None, float(v), labels.get(int(r))) for r, v in zip(rows, s, strict=True)], [],
                  len(s), n_items, None if item_scores is None else np.asarray(item_scores, dtype=np.float64),
                  None if embeddings is None else np.asarray(embeddings, dtype=np.float64), texts,
                  token_profiles=token_profiles)  # fmt: skip
    rd = reading(ev, o)
    rd.findings, rd.labels = findings, labels or None
    rd.terms.labels = labels
    return decide(ev, o, resume=Decision(rd), only=CULPRIT_STEPS).culprits()
