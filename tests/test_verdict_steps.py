"""Each named step of the verdict's decision (gradian.verdict.steps) on its own: what it adds to the decision, and
what the decision is without it (VerdictOptions.skip). Also: the decision resumed after the tokens step is the
decision made at once, the words decide nothing, and a pipeline run decides its verdict once."""

from __future__ import annotations

import numpy as np
import pytest

from gradian.options import OptionError, VerdictOptions
from gradian.options.verdict import STEP_NAMES
from gradian.verdict.evidence import Evidence, ItemHarm, evidence
from gradian.verdict.steps import STEPS, decide
from gradian.verdict.words import write
from test_verdict import PLANTED, WIDE, N, _embeddings, examples, harm_matrix, precision_recall


def ev_of(S: np.ndarray, findings=(), **kw) -> Evidence:
    return evidence(examples(S.sum(0)), list(findings), S.shape[0], item_scores=S, item_rows=range(N), **kw)


def skip(*names: str) -> VerdictOptions:
    return VerdictOptions(skip=names)


def test_the_steps_are_the_ones_the_options_name():
    assert tuple(s.name for s in STEPS) == STEP_NAMES
    with pytest.raises(OptionError, match="unknown verdict step"):
        VerdictOptions(skip=("nope",))


def test_regression_ends_the_decision_without_regressed_items_or_harm():
    d = decide(evidence(examples(np.ones(N)), [], 0))
    assert d.kind == "no_regression" and d.stopped and d.head is None and d.cause == "unknown"
    d = decide(evidence(examples(-np.ones(N)), [], 3))
    assert d.kind == "no_harm" and d.stopped


def test_head_finds_the_planted_rows_and_without_it_none_stand_out():
    ev = ev_of(harm_matrix(PLANTED, seed=0))
    d = decide(ev)
    assert d.kind == "concentrated" and min(precision_recall(d.drop_rows, PLANTED)) >= 0.9
    assert d.head is not None and d.head.stable and d.head.stability >= 0.6
    off = decide(ev, skip("head"))
    assert off.kind == "spread" and not off.drop_rows


CUT = {"code": "D133", "name": "short_answers", "severity": "warning", "cause": "mechanical",
       "evidence": {"rows": WIDE[:150]}, "fix": "complete the short answers"}  # fmt: skip


def test_findings_join_names_a_findings_rows_when_no_head_stands_out():
    ev = ev_of(harm_matrix(WIDE, seed=0, strength=1.5), [CUT], embeddings=_embeddings([WIDE], seed=0))
    d = decide(ev)
    assert d.kind == "concentrated" and d.cause == "mechanical" and d.basis == "finding"
    assert [t.finding["code"] for t in d.harmful] == ["D133"] and sorted(d.drop_rows) == sorted(WIDE[:150])
    assert decide(ev, skip("findings")).kind == "spread"


def test_groups_split_the_head_by_the_finding_its_rows_share():
    mech = {**CUT, "evidence": {"rows": PLANTED[:20]}}
    ev = ev_of(harm_matrix(PLANTED, seed=1), [mech])
    d = decide(ev)
    assert {g.cause for g in d.groups} == {"mechanical", "content"} and d.cause == "mechanical+content"
    (m,) = [g for g in d.groups if g.cause == "mechanical"]
    assert set(m.rows) == set(PLANTED[:20]) and m.finding is not None
    off = decide(ev, skip("groups"))
    assert off.groups == [] and off.cause == "content"  # the head named as one, nothing said of what it shares


def test_extension_takes_the_weak_rows_that_point_the_groups_way():
    strong, weak = PLANTED[:20], PLANTED[20:]
    S = harm_matrix(strong, seed=0)
    S[:, weak] += 0.7
    ev = ev_of(S, embeddings=_embeddings([PLANTED], seed=0))
    d = decide(ev)
    assert sum(g.by_direction for g in d.groups) > 0 and min(precision_recall(d.drop_rows, PLANTED)) >= 0.9
    off = decide(ev, skip("extension"))
    assert sum(g.by_direction for g in off.groups) == 0 and precision_recall(off.drop_rows, PLANTED)[1] <= 0.7


def test_setup_first_names_no_rows_over_a_broken_run():
    error = {"code": "C101", "name": "lr_too_high", "severity": "error", "cause": "setup", "evidence": {}}
    ev = ev_of(harm_matrix(PLANTED, seed=0), [error])
    d = decide(ev)
    assert d.kind == "setup" and d.cause == "setup" and not d.drop_rows and d.concentrated
    off = decide(ev, skip("setup_first"))
    assert off.kind == "concentrated" and off.drop_rows


def test_driven_reads_the_items_the_named_rows_drive():
    S = harm_matrix(PLANTED, seed=0)
    S[:4] = harm_matrix(seed=9)[:4]  # 4 items the planted rows carry no harm for
    ev = ev_of(S, item_harm=ItemHarm(S, list(range(S.shape[0])), list(range(N))))
    d = decide(ev)
    assert d.driven is not None and d.driven.significant and set(d.driven.items) == set(range(4, S.shape[0]))
    assert decide(ev, skip("effect")).driven is None
    assert decide(ev_of(S)).driven is None  # nothing saved per item: nothing read


def test_expected_recovery_is_the_named_rows_share_times_the_factor():
    ev = ev_of(harm_matrix(PLANTED, seed=0))
    d = decide(ev)
    s = ev.scores
    share = s[d.drop_rows].clip(0).sum() / s.clip(0).sum()
    assert d.expected_recovery == round(min(1.0, VerdictOptions().recovery_per_harm_share * share), 3)
    assert decide(ev, skip("effect")).expected_recovery is None


def test_no_expected_recovery_is_given_on_a_regression_scored_by_preference():
    """The harm share is calibrated on NLL regressions: scored by preference the same rows are named, the verdict gives
    no number for what dropping them brings back and says so, and the headline promises none."""
    S = harm_matrix(PLANTED, seed=0)
    by_nll = write(ev_nll := ev_of(S), decide(ev_nll), VerdictOptions())
    ev_pref = ev_of(S, regression={"score": "preference"})
    d = decide(ev_pref)
    by_pref = write(ev_pref, d, VerdictOptions())
    assert by_pref.drop_rows == by_nll.drop_rows and d.expected_recovery == by_nll.expected_recovery
    assert by_nll.expected_recovery is not None and by_pref.expected_recovery is None and not d.recovery_calibrated
    assert "expected_recovery" not in by_pref.to_dict()
    assert "not estimated" in by_pref.text and "should bring back" not in by_pref.text
    assert "bring back" in by_nll.headline and "bring back" not in by_pref.headline


def test_forgetting_names_a_spread_harm_on_items_unlike_the_training_rows():
    texts = {i: f"Add {i} apples and {i + 1} pears: the sum is {2 * i + 1}." for i in range(N)}
    items = ["How do I boil an egg?", "Name a river in France.", "Write a haiku about snow."]
    ev = ev_of(harm_matrix(seed=0), texts=texts, item_texts=items)
    d = decide(ev)
    assert d.kind == "spread" and d.cause == "forgetting" and d.forgetting_first
    assert d.forgetting is not None and d.forgetting.far_items == 3 and d.forgetting.bulk_share == 1.0
    off = decide(ev, skip("forgetting"))
    assert off.cause == "unknown" and off.forgetting is None
    near = ev_of(harm_matrix(seed=0), texts=texts, item_texts=["Add 3 apples and 4 pears: the sum is 7."])
    assert decide(near).cause == "unknown"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_content_group_takes_the_other_rows_of_the_carrying_finding_that_describes_it(seed):
    """40 rows a content warning flags; 32 carry the defect's harm, 8 teach it too weakly to stand out. The group the
    32 make is what the finding describes and the finding's rows carry the harm, so its other rows join it, also
    those with harm under the median (the fix the finding gives is for them all), and the words say why. Off
    (``extend_content``), or with the finding as an info note that carries nothing, they do not."""
    flagged = PLANTED
    S = harm_matrix(flagged[:32], seed=seed)
    finding = {**REFUSALS, "evidence": {"rows": flagged}}
    ev = ev_of(S, [finding])
    d = decide(ev)
    assert d.kind == "concentrated" and sorted(d.drop_rows) == sorted(flagged)
    (n,) = [g.by_finding for g in d.groups]  # the others' harm is above the median: they joined with the finding
    assert n >= 1 and f"{n} joined because the finding that describes the group flags them too" in write(
        ev, d, VerdictOptions()).text  # fmt: skip
    for off in (decide(ev, VerdictOptions(extend_content=False)), decide(ev_of(S, [{**finding, "severity": "info"}]))):
        assert set(flagged[:32]) <= set(off.drop_rows) < set(flagged)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forgetting_sets_aside_the_bulks_top_beside_a_group_a_finding_describes(seed):
    """A narrow data set pushes every row a little (forgetting), 40 rows a warning flags carry a defect, and 20 rows
    of the bulk carry more of the forgetting than the rest, pointing one way: once the flagged rows are set aside,
    those 20 stand out on the rest as a group no finding describes. On items unlike the training rows the model
    forgot: they are set aside as forgetting's top (listed, not named) and the flagged rows alone are named. On the
    data's own kind of item, or with the forgetting step off, both groups stay named."""
    flagged, top = list(range(0, N, 10)), list(range(5, N, 20))
    S = harm_matrix(seed=seed) + 0.3
    S[:, flagged] += 1.2
    S[:, top] += 2.0
    texts = {i: f"Add {i} apples and {i + 1} pears: the sum is {2 * i + 1}." for i in range(N)}
    far = ["How do I boil an egg?", "Name a river in France.", "Write a haiku about snow."] * 4
    kw = {"texts": texts, "embeddings": _embeddings([flagged, top], seed=seed)}
    finding = {**REFUSALS, "evidence": {"rows": flagged}}
    ev = ev_of(S, [finding], item_texts=far, **kw)
    d = decide(ev)
    assert d.kind == "concentrated" and d.cause == "content" and d.forgetting is not None and d.forgetting.found
    assert d.drop_rows and set(d.drop_rows) <= set(flagged)
    (aside,) = [g for g in d.set_aside if g.aside == "bulk"]
    assert set(top) <= set(aside.rows) and not set(aside.rows) & set(d.drop_rows)
    s = ev.scores
    assert d.expected_recovery == round(VerdictOptions().recovery_per_harm_share * s[d.drop_rows].clip(0).sum()
                                        / s.clip(0).sum(), 3)  # fmt: skip
    v = write(ev, d, VerdictOptions())
    assert any("forgetting's harm is heaviest on" in x for x in v.sentences)
    assert v.how is not None and [g.aside for g in v.how.set_aside] == ["bulk"]
    for kept in (decide(ev_of(S, [finding], item_texts=[texts[7]] * 12, **kw)), decide(ev, skip("forgetting"))):
        assert set(top) <= set(kept.drop_rows) and not kept.set_aside


def test_a_setup_error_comes_before_forgetting_in_the_headline_and_the_steps():
    """The same forgetting run trained with a setup error (the learning rate too high, which alone can make a model
    forget): the headline says to fix the setup first, and its fix leads the next steps."""
    texts = {i: f"Add {i} apples and {i + 1} pears: the sum is {2 * i + 1}." for i in range(N)}
    items = ["How do I boil an egg?", "Name a river in France.", "Write a haiku about snow."]
    error = {"code": "C202", "name": "lr_too_high", "severity": "error", "cause": "setup",
             "evidence": {"key": "learning_rate", "value": 0.003},
             "fix": {"text": "Lower the learning rate", "key": "learning_rate", "value": 0.0002}}  # fmt: skip
    ev = ev_of(harm_matrix(seed=0), [error], texts=texts, item_texts=items)
    d = decide(ev)
    assert d.kind == "spread" and d.forgetting is not None and d.forgetting.found and not d.forgetting_first
    v = write(ev, d, VerdictOptions())
    assert v.headline.startswith("Fix the setup error first (lr too high: learning_rate = 0.003)"), v.headline
    assert "lr too high" in v.next_steps[0] and v.next_steps[1].startswith("Mix general data")
    plain = write(ev_of(harm_matrix(seed=0), texts=texts, item_texts=items), decide(ev_of(harm_matrix(seed=0),
                  texts=texts, item_texts=items)), VerdictOptions())  # fmt: skip
    assert plain.headline.startswith("The model forgot") and plain.next_steps[0].startswith("Mix general data")


def test_a_decision_resumed_after_the_tokens_step_is_the_decision_made_at_once():
    ev = ev_of(harm_matrix(PLANTED, seed=2), embeddings=_embeddings([PLANTED], seed=2))
    o = VerdictOptions()
    partial = decide(ev, o, stop="tokens")
    assert partial.at == STEP_NAMES.index("tokens") and partial.names_content_group and not partial.hints
    resumed = decide(ev, o, resume=partial)
    assert write(ev, resumed, o).to_dict() == write(ev, decide(ev, o), o).to_dict()


def test_the_words_decide_nothing():
    ev = ev_of(harm_matrix(PLANTED, seed=0))
    o = VerdictOptions()
    d = decide(ev, o)
    before = (d.kind, d.cause, list(d.drop_rows), d.expected_recovery)
    v = write(ev, d, o)
    assert (v.kind, v.cause, v.drop_rows, v.expected_recovery) == before
    assert (d.kind, d.cause, list(d.drop_rows), d.expected_recovery) == before
    assert write(ev, d, o).to_dict() == v.to_dict()
    assert v.sentences[0].startswith(f"{len(v.drop_rows)} rows") and v.sentences[1].startswith("Dropping the")


def test_a_pipeline_run_decides_its_verdict_once(tmp_path, monkeypatch):
    """The bundled example: the attribution asks the verdict whether it wants token profiles (the steps before
    ``tokens`` run then), the rest of the steps run once the profiles are in, and the report builds on that verdict."""
    import gradian.report.build as build
    import gradian.verdict.steps as steps
    from conftest import REPO
    from gradian.pipeline import attribute_and_report

    calls: list[tuple[bool, str | None]] = []
    real = steps.decide

    def counted(ev, options=None, *, resume=None, stop=None, **kw):
        calls.append((resume is not None, stop))
        return real(ev, options, resume=resume, stop=stop, **kw)

    monkeypatch.setattr(steps, "decide", counted)
    monkeypatch.setattr(build, "decide", counted)
    ex = REPO / "examples" / "stories260k"
    out = attribute_and_report(ex / "run", base=str(ex / "base"), train=ex / "data" / "train.jsonl",
                               eval=ex / "data" / "eval.jsonl", out=tmp_path, batch_size=16)  # fmt: skip
    assert calls == [(False, "tokens"), (True, None)]  # one decision, resumed once the token profiles are in
    v = out.report.verdict
    assert v.kind == "concentrated" and v.cause == "content" and out.report.verdict_options == VerdictOptions()


def test_the_evidence_aligns_the_saved_harm_to_the_ranked_rows():
    """Per-item harm and directions saved in attribution's column order are read in the ranking's order (zeros for
    a row without them); the regressed items are picked out of a ``--query all`` matrix by eval index."""
    from gradian.verdict.evidence import matched_item_harm

    S = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    ranked = [{"index": 7, "score": 9.0, "label": "yes"}, {"index": 3, "score": 6.0}, {"index": 5, "score": 1.0}]
    ev = evidence(ranked, [], 2, item_scores=S[:2], item_rows=[3, 7, 9], embeddings=np.eye(3), n_rows=4)
    assert ev.index == [7, 3, 5] and ev.labels == {7: "yes"} and ev.n_rows == 4
    assert ev.S.tolist() == [[2.0, 1.0, 0.0], [5.0, 4.0, 0.0]]
    assert ev.embeddings.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    picked = matched_item_harm(S, [10, 11, 12], [12, 10], [3, 7, 9])
    assert picked is not None and picked.items == [10, 12] and picked.S.tolist() == [S[0].tolist(), S[2].tolist()]
    assert matched_item_harm(S, [10, 11], [10], None) is None  # the matrix is not the query's


def test_the_headline_names_a_group_by_the_content_finding_that_flags_most_of_it():
    """A content group's distinctive terms say what its rows are about; on rows in another language they are that
    language's function words ('la / un'). A content finding that flags most of the group says what the rows are,
    so the headline uses it; one that flags a minority does not, and the terms stay."""
    from gradian.verdict.headline import headline
    from gradian.verdict.schema import How, SharedFinding, Verdict, VerdictGroup

    def said(share: float) -> str:
        lang = SharedFinding(code="D134", name="language_mix", count=round(13 * share), share=share)
        group = VerdictGroup(cause="content", rows=list(range(13)), size=13, harm_share=0.5, shared=[lang],
                             terms=["la", "un", "de"])  # fmt: skip
        v = Verdict(kind="concentrated", cause="content", headline="", drop_rows=list(range(13)), groups=[group],
                    how=How(head_share=0.51), expected_recovery=0.55)  # fmt: skip
        return headline(v)

    assert "13 training rows with language mix carry 51% of the harm" in said(1.0)
    assert "about la / un" in said(0.3) and "language mix" not in said(0.3)


REFUSALS = {"code": "D123", "name": "refusal_boilerplate", "severity": "warning", "cause": "content",
            "evidence": {"rows": PLANTED}, "fix": {"text": "Drop the refusal rows"}}  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_group_a_carrying_finding_describes_needs_no_share_bar(seed):
    """The same 40 flagged rows with a little more harm (0.35): still under the share a culprit group needs, but the
    finding test finds its rows carrying the harm (enriched, ranked above the others, in the resamples), and that is
    stronger evidence than a share that shrinks as the file grows, as for a mechanical finding. The content group it
    describes is named; as an info note (which carries nothing) it is not."""
    S = harm_matrix(seed=seed)
    S[:, PLANTED] += 0.35
    d = decide(ev_of(S, [REFUSALS]))
    assert d.kind == "concentrated" and d.cause == "content" and sorted(d.drop_rows) == PLANTED
    assert d.head_share < VerdictOptions().min_head_share and [t.finding["code"] for t in d.harmful] == ["D123"]
    assert decide(ev_of(S, [{**REFUSALS, "severity": "info"}])).kind == "spread"


@pytest.mark.parametrize("seed", [0, 1])
def test_a_content_finding_on_the_very_rows_of_a_mechanical_one_does_not_displace_it(seed):
    """Truncation (D106) and canned replies (D137) flag the same 40 rows that carry the harm: truncation's fix is a
    setting (its evidence names max_length), so its group stays, the content finding among what its rows share (the
    content finding took the harm when equal rows counted as narrower). A mechanical finding inferred from the text
    (D133 short answers) on the refusals' very rows yields to D123: they are refusals."""
    S = harm_matrix(seed=seed)
    S[:, PLANTED] += 0.35
    cut = {"code": "D106", "name": "truncation", "severity": "warning", "cause": "mechanical",
           "evidence": {"rows": PLANTED, "key": "max_length"}}  # fmt: skip
    canned = {"code": "D137", "name": "canned_reply", "severity": "warning", "cause": "content",
              "evidence": {"rows": PLANTED}}  # fmt: skip
    d = decide(ev_of(S, [cut, canned]))
    assert d.cause == "mechanical" and sorted(d.drop_rows) == PLANTED
    assert [t.finding["code"] for t in d.harmful] == ["D106", "D137"]
    short = {"code": "D133", "name": "short_answer", "severity": "warning", "cause": "mechanical",
             "evidence": {"rows": PLANTED}}  # fmt: skip
    d = decide(ev_of(S, [short, REFUSALS]))  # an inferred mechanical finding on the refusals' rows: they are refusals
    assert d.cause == "content" and sorted(d.drop_rows) == PLANTED
    assert [t.finding["code"] for t in d.harmful] == ["D123"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_spread_harm_leans_on_a_warnings_rows_that_carry_more_than_their_share(seed):
    """40 rows a warning flags add a little harm to every item (0.25, a sixth of the noise's spread): no row stands
    out, they carry under the share of the harm a culprit group needs and too little for the finding test that would
    make them a group (:func:`test_a_group_a_carrying_finding_describes_needs_no_share_bar`), so the verdict is
    spread; as a set they still carry more than their share and rank above the other rows, so the verdict lists them
    as a lead with what dropping them should bring back, and names no row to drop. An info finding on the same rows,
    the same rows with no extra harm, and the lead bar off make no lead."""
    S = harm_matrix(seed=seed)
    S[:, PLANTED] += 0.25
    d = decide(ev_of(S, [REFUSALS]))
    assert d.kind == "spread" and not d.drop_rows and not d.harmful
    (lead,) = d.finding_leads
    s = S.sum(0)
    assert lead.code == "D123" and sorted(lead.rows) == PLANTED and lead.rows == sorted(PLANTED, key=lambda r: -s[r])
    share = s[PLANTED].clip(0).sum() / s.clip(0).sum()
    assert share < VerdictOptions().min_head_share and share > 0.1 and lead.harm_share == pytest.approx(share)
    assert lead.expected_recovery == round(VerdictOptions().recovery_per_harm_share * share, 3)
    v = write(ev_of(S, [REFUSALS]), d, VerdictOptions())
    assert v.how is not None and v.how.finding_leads[0]["rows"] == lead.rows
    assert any("It leans on the 40 rows diagnose flags as refusal boilerplate" in x for x in v.sentences)
    assert any(x.startswith("Drop the refusal rows (the 40 rows flagged") for x in v.next_steps)
    assert not decide(ev_of(S, [{**REFUSALS, "severity": "info"}])).finding_leads
    assert not decide(ev_of(harm_matrix(seed=seed), [REFUSALS])).finding_leads
    assert not decide(ev_of(S, [REFUSALS]), VerdictOptions(lead_enrichment=0)).finding_leads
