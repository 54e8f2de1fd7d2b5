"""Every branch of the verdict, on per-item harm matrices drawn from seeded heavy-tailed distributions.

The matrices mimic what attribution gives: most rows' per-item harm is heavy-tailed noise of either sign, a planted
group harms every regressed item. The verdict must find the planted rows, say what they share, and name nobody when
nothing is planted."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gradian.attribute.token_profiles import TokenProfiles
from gradian.diagnose.types import Finding
from gradian.options.verdict import VerdictOptions
from gradian.report.render import rows_to_read
from gradian.verdict.culprits import head_mask
from gradian.verdict.groups import finding_cause
from gradian.verdict.make import make_verdict
from gradian.verdict.schema import Verdict
from gradian.verdict.steps import find_culprits, setup_errors
from gradian.verdict.words import SPREAD_THIN, TOKEN_PROFILES_HINT

N = 400


def harm_matrix(planted=(), *, items=12, seed=0, strength=6.0, helpful=()):
    """(items x N) per-item harm: Student-t noise (3 dof) for every row, plus ``strength`` on every item for the
    planted rows, minus it for ``helpful`` rows (a contradiction's rows that still teach the old fact)."""
    rng = np.random.default_rng(seed)
    S = rng.standard_t(3, size=(items, N))
    for r in planted:
        S[:, r] += strength * (1 + 0.3 * rng.random())
    for r in helpful:
        S[:, r] -= strength
    return S


def examples(s):
    return [{"index": i, "id": f"r{i}", "score": float(v)} for i, v in enumerate(s)]


def regressed(m):
    return [{"index": j, "base_nll": 1.0, "finetuned_nll": 2.0} for j in range(m)]


def verdict(S, findings=(), **kw):
    s = S.sum(0)
    v = make_verdict([], list(findings), examples(s), regressed(S.shape[0]), item_scores=S, item_rows=range(N), **kw)
    return v.to_dict()  # as report.json holds it


PLANTED = list(range(0, 400, 10))  # 40 rows, 10%, spread over the file


def precision_recall(drop, planted):
    hit = len(set(drop) & set(planted))
    return hit / max(1, len(drop)), hit / len(planted)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_content_group_is_found(seed):
    S = harm_matrix(PLANTED, seed=seed, helpful=range(5, 400, 40))
    v = verdict(S)
    assert v["kind"] == "concentrated" and v["cause"] == "content" and v["reliable"]
    p, r = precision_recall(v["drop_rows"], PLANTED)
    assert p >= 0.9 and r >= 0.9
    assert v["confidence"]["level"] == "high"
    assert v["drop_rows"] == sorted(v["drop_rows"], key=lambda i: -S[:, i].sum())  # most harmful first
    assert any("--verify" in s and "drop_rows.txt" in s for s in v["next_steps"])
    assert v["policy"] == VerdictOptions().policy()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nothing_planted_names_no_culprit(seed):
    v = verdict(harm_matrix(seed=seed))
    assert v["kind"] == "spread" and v["drop_rows"] == [] and v["groups"] == []
    assert "no rows are named to drop" in v["text"]
    assert v["next_steps"]


def test_harm_from_one_item_is_unstable():
    """Ten rows harm a single regressed item hugely: resampling the items makes them come and go."""
    S = harm_matrix(items=12, seed=3)
    S[0, :10] += 200.0
    v = verdict(S)
    assert v["kind"] == "spread"
    assert "resampled" in v["text"]
    assert v["confidence"]["stability"] is not None and v["confidence"]["stability"] < VerdictOptions().min_stability


def test_an_agreement_just_under_the_bar_does_not_read_as_the_bar():
    """With the bar set a hair above the agreement measured, the sentence must not print both as the same number."""
    S = harm_matrix(items=12, seed=3)
    S[0, :10] += 200.0
    measured = verdict(S)["confidence"]["stability"]
    bar = measured + 0.0004  # report.json keeps 4 decimals: the true agreement is within 0.00005 of it
    assert f"{measured:.2f}" == f"{bar:.2f}"  # the case: two decimals would print them alike
    v = verdict(S, policy=VerdictOptions(min_stability=bar))
    got, need = re.search(r"agreement ([0-9.]+), under the ([0-9.]+) a culprit group needs", v["text"]).groups()
    assert float(got) < float(need) and abs(float(got) - measured) < 0.001 and abs(float(need) - bar) < 0.001


def test_a_group_that_is_one_labels_rows_is_checked_before_it_is_dropped():
    """The named rows all share one completion (diagnose's repeated-target finding names it): dropping them would take
    the label out of the data, so the first step is to check their labels; without the shared target, drop first."""
    S = harm_matrix(PLANTED, seed=6)
    same = {"code": "D116", "name": "identical_targets", "severity": "warning", "cause": "content",
            "evidence": {"rows": PLANTED, "target": "sad."}, "fix": "Down-sample the repeated target"}  # fmt: skip
    v = verdict(S, [same])
    assert v["kind"] == "concentrated" and v["cause"] == "content"
    assert v["groups"][0]["shared"][0]["target"] == "sad."
    n, labelled = len(v["drop_rows"]), len(set(v["drop_rows"]) & set(PLANTED))  # the finding flags the planted rows
    assert v["next_steps"][0].startswith(f"Check the labels of the {labelled} rows whose completion is 'sad.'")
    assert v["next_steps"][1].startswith(f"Or drop the {n} rows")
    share = "They share" if labelled == n else f"{round(100 * labelled / n)}% of them share"
    assert f"{share} the completion 'sad.'" in v["text"]
    plain = verdict(S, [{**same, "evidence": {"rows": PLANTED}}])
    assert plain["drop_rows"] == v["drop_rows"] and plain["next_steps"][0].startswith(f"Drop the {n} rows")
    assert "share the completion" not in plain["text"]


def test_a_label_set_names_the_label_from_the_rows_themselves():
    """A pure label set (every completion one of two short labels) gets no repeated-target finding; the report reads
    each row's completion, so the group of " negative" rows is still told as one label's rows, and the label
    survives a re-render from report.json alone."""
    import json

    from gradian.data.types import Example
    from gradian.report import build_report
    from gradian.verdict.evidence import label_of

    train = [Example(index=i, source="train.jsonl", format="prompt_completion", prompt=f"Review {i}: ...",
                     completion=" Negative" if i in PLANTED or i % 2 else " positive") for i in range(N)]  # fmt: skip
    assert label_of(train[0], 5) == "negative" and label_of(train[2], 5) == "positive"
    assert label_of(Example(index=0, source="t", format="text", text="a story"), 5) is None
    S = harm_matrix(PLANTED, seed=7)
    attribution = {
        "method": "ekfac",
        "examples": [{"index": i, "id": None, "score": float(v)} for i, v in enumerate(S.sum(0))],
        "regressed": [{"index": j, "base_nll": 1.0, "finetuned_nll": 2.0} for j in range(S.shape[0])],
        "settings": {"query_items": list(range(S.shape[0]))},
    }
    built = build_report(attribution, findings=[], train_examples=train, item_scores=S).to_dict()
    v = built["verdict"]
    assert v["kind"] == "concentrated" and len(set(v["drop_rows"]) & set(PLANTED)) >= 0.9 * len(v["drop_rows"])
    (g,) = [g for g in v["groups"] if g["cause"] == "content"]
    negative = sum(label_of(train[r], 5) == "negative" for r in g["rows"])
    assert g["label"] == "negative" and g["label_share"] == negative / len(g["rows"])
    assert built["examples"][0]["label"] == "negative"  # report.json keeps each row's label
    assert v["next_steps"][0].startswith(f"Check the labels of the {negative} rows whose completion is 'negative'")
    from gradian.report.render import render_html, render_markdown

    trait = f"{round(100 * negative / len(g['rows']))}% share the completion 'negative' (a label: check, then drop)"
    assert trait in render_markdown(built) and trait.replace("'", "&#x27;") in render_html(built)
    again = build_report(json.loads(json.dumps(built))).to_dict()["verdict"]  # no item scores: a looser read
    assert again["groups"][0]["label"] == "negative" and "rows whose completion is 'negative'" in again["next_steps"][0]


def test_mechanical_group_fix_comes_first():
    S = harm_matrix(PLANTED, seed=4)
    cut = {"code": "D130", "name": "cut_mid_sentence", "severity": "warning", "cause": "mechanical",
           "evidence": {"rows": PLANTED[:38] + [1, 2]}, "fix": "drop or complete the cut rows"}  # fmt: skip
    v = verdict(S, [cut])
    assert v["kind"] == "concentrated" and v["cause"] == "mechanical"
    assert "looks mechanical" in v["text"] and "D130 cut_mid_sentence" in v["text"]
    assert v["next_steps"][0].startswith("Fix cut mid sentence (D130 cut_mid_sentence): drop or complete")


def test_two_groups_content_and_mechanical():
    content, mech = PLANTED[:20], list(range(5, 205, 10))
    S = harm_matrix(content + mech, seed=5)
    loop = {"code": "D131", "name": "repetition", "severity": "warning", "cause": "mechanical",
            "evidence": {"rows": mech}, "fix": "drop the looping rows"}  # fmt: skip
    v = verdict(S, [loop])
    assert v["cause"] == "mechanical+content"
    causes = {g["cause"]: set(g["rows"]) for g in v["groups"]}
    assert causes["mechanical"] <= set(mech) and len(causes["mechanical"]) >= 18
    assert len(causes["content"] & set(content)) >= 18
    assert "Group 1" in v["text"] and "Group 2" in v["text"]


def test_mechanical_finding_on_a_minority_is_not_the_cause():
    S = harm_matrix(PLANTED, seed=6)
    few = {"code": "D130", "name": "cut_mid_sentence", "cause": "mechanical", "evidence": {"rows": PLANTED[:3]}}
    assert verdict(S, [few])["cause"] == "content"


def test_mechanical_finding_common_in_the_file_is_not_enriched():
    """A finding that flags half the file flags half the culprits by chance: not their cause."""
    S = harm_matrix(PLANTED, seed=7)
    rows = [i for i in range(N) if i % 20 == 0 or i % 2 == 1]  # half the planted rows, 55% of the file
    everywhere = {"code": "D130", "name": "cut_mid_sentence", "cause": "mechanical", "evidence": {"rows": rows}}
    assert verdict(S, [everywhere])["cause"] == "content"


def test_content_finding_is_named_but_the_cause_stays_content():
    """Rows that share eval prompts (D105) are what the culprits have in common, not a pipeline mechanism."""
    S = harm_matrix(PLANTED, seed=8)
    overlap = {"code": "D105", "name": "train_eval_overlap", "severity": "warning",
               "evidence": {"rows": PLANTED[:30]}, "fix": "drop the overlapping train rows"}  # fmt: skip
    v = verdict(S, [overlap])
    assert v["cause"] == "content" and "looks mechanical" not in v["text"]
    assert "What they have in common" in v["text"] and "D105" in v["text"]
    assert v["next_steps"][0].startswith("Drop the ")  # the rows first; what they share after
    assert v["next_steps"][1].startswith("Fix train eval overlap (D105 train_eval_overlap): drop the overlapping")


def test_findings_on_the_same_rows_all_explain_the_group():
    """D106 and D107 flag the same culprit rows: both explain it; an unrelated row error is 'separate'."""
    S = harm_matrix(PLANTED, seed=9)
    findings = [
        {"code": "D106", "name": "truncation", "severity": "error", "evidence": {"rows": PLANTED}, "fix": "x"},
        {"code": "D107", "name": "completion_cut", "severity": "error", "evidence": {"rows": PLANTED}, "fix": "y"},
        {"code": "D109", "name": "missing_eos", "severity": "error", "evidence": {"rows": [51, 52]}, "fix": "add EOS"},
    ]
    v = verdict(S, findings)
    assert v["cause"] == "mechanical"
    separate = [s for s in v["sentences"] if s.startswith("Separately")]
    assert len(separate) == 1 and "D109" in separate[0]
    assert "D106" not in separate[0] and "D107" not in separate[0]


def test_setup_error_said_first():
    S = harm_matrix(PLANTED, seed=10)
    findings = [
        {"code": "L302", "name": "loss_nan", "severity": "error", "evidence": {"steps": [60]}, "fix": "lower the lr"},
        {"code": "C10", "name": "lr_full_ft", "severity": "error", "evidence": {"key": "learning_rate", "value": 0.01},
         "fix": "use 2e-4"},
    ]  # fmt: skip
    v = verdict(S, findings)
    assert not v["reliable"]
    assert v["sentences"][0].startswith("Fix the setup first: 2 setup errors") and "unreliable" in v["sentences"][0]
    assert v["next_steps"][0].startswith("Fix loss nan (L302 loss_nan)")
    assert "config key `learning_rate`, now 0.01" in v["next_steps"][1]
    assert [c["key"] for c in v["config_changes"]] == [None, "learning_rate"]
    # the rows that stand out are described, after the warning, but over a broken run none is named to drop
    assert v["kind"] == "setup" and v["cause"] == "setup" and not v["drop_rows"]
    assert set(PLANTED) <= set(v["how"]["head"]) and "none are named to drop" in v["sentences"][1]
    assert v["next_steps"][-1].startswith("Re-train with the setup fixed")
    assert verdict(S)["kind"] == "concentrated"  # the same harm on a sound run names them


def test_row_error_covering_most_rows_is_a_setup_error():
    pervasive = {"code": "D9", "name": "mask_over_prompt", "severity": "error", "evidence": {"rows": list(range(80))}}
    local = {"code": "D8", "name": "cut", "severity": "error", "evidence": {"rows": [1, 2]}}
    warn = {"code": "C1", "name": "lr", "severity": "warning", "evidence": {"key": "lr"}}
    assert setup_errors([pervasive, local, warn], n_rows=100) == [Finding.from_dict(pervasive)]


def test_no_regression_and_within_noise():
    s = harm_matrix(PLANTED).sum(0)
    v = make_verdict([], [], examples(s), []).to_dict()
    assert v["kind"] == "no_regression" and v["drop_rows"] == [] and "no regression" in v["text"]
    v = make_verdict([], [], examples(s), [], regression={"rose": 7, "drift": 0.12, "cutoff": 0.24}).to_dict()
    assert v["kind"] == "no_regression" and "within noise" in v["text"] and "0.120 nats/token" in v["text"]


def test_no_positive_harm():
    v = make_verdict([], [], examples(-np.abs(harm_matrix().sum(0))), regressed(3)).to_dict()
    assert v["kind"] == "no_harm" and "no training row has positive harm" in v["text"]


def test_without_item_scores_stability_is_unmeasured():
    s = harm_matrix(PLANTED, seed=11).sum(0)
    v = make_verdict([], [], examples(s), regressed(12)).to_dict()
    assert v["kind"] == "concentrated"
    assert v["confidence"] == {"stability": None, "level": "unmeasured", "basis": "head"}


def test_head_mask_reads_only_the_positive_side():
    """A strong helpful tail (rows that still teach the old fact) does not hide the harmful one."""
    S = harm_matrix(PLANTED, seed=12, helpful=range(5, 405, 10))
    head = set(np.flatnonzero(head_mask(S.sum(0), VerdictOptions())))
    assert len(head & set(PLANTED)) >= 36 and len(head & set(PLANTED)) >= 0.9 * len(head)


def test_policy_rejects_bad_values():
    with pytest.raises(ValueError, match="head_z"):
        VerdictOptions(head_z=float("nan"))
    with pytest.raises(ValueError, match="min-head-share"):
        VerdictOptions(min_head_share=-1)


def test_finding_cause_reads_the_rule_then_falls_back_to_the_code():
    assert finding_cause({"code": "D999", "cause": "content"}) == "content"
    assert finding_cause({"code": "D105"}) == "content"
    assert finding_cause({"code": "D106"}) == "mechanical"
    assert finding_cause({"code": "C201"}) == "setup"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_that_lead_only_summed_over_hundreds_of_items_are_not_named(seed):
    """40 rows add a little harm (0.5, a third of the noise's spread) to each of 240 items: summed over all of them
    they stand out, and a resample of all 240 items repeats most of them, so it agrees (the old check named them);
    a resample of 40 items, the eval size the thresholds were calibrated at, does not find them. The same rows at a
    culprit's strength are named on the same 240 items."""
    S = harm_matrix(PLANTED, items=240, seed=seed, strength=0.5)
    every_item = verdict(S, policy=VerdictOptions(resample_items=0))
    assert every_item["kind"] == "concentrated" and every_item["confidence"]["stability"] >= 0.8
    v = verdict(S)
    assert v["kind"] == "spread" and v["drop_rows"] == []
    assert v["confidence"]["stability"] < VerdictOptions().min_stability
    strong = verdict(harm_matrix(PLANTED, items=240, seed=seed, strength=2.0))
    assert strong["kind"] == "concentrated" and precision_recall(strong["drop_rows"], PLANTED) == (1.0, 1.0)


def test_find_culprits_keeps_only_rows_stable_under_resampling():
    """A row that harms one item enormously is in ~63% of the resampled heads (the item's chance of being drawn):
    kept at the calibrated keep_frequency 0.5, dropped at 0.8; the planted rows are kept either way."""
    S = harm_matrix(PLANTED, seed=13)
    S[0, 7] += 300.0
    loose = find_culprits(S, S.sum(0), list(range(N)))
    strict = find_culprits(S, S.sum(0), list(range(N)), policy=VerdictOptions(keep_frequency=0.8))
    assert loose.concentrated and strict.concentrated
    assert 7 in loose.head and 7 not in strict.head
    assert len(set(strict.head) & set(PLANTED)) >= 36


def _embeddings(groups, *, dim=32, seed=0, spread=0.5):
    """(N x dim) gradient directions: random for every row; the rows of each group in ``groups`` share a direction
    (plus noise of ``spread`` per coordinate), as rows that teach the same thing do."""
    rng = np.random.default_rng(seed)
    E = rng.standard_normal((N, dim))
    for rows in groups:
        d = rng.standard_normal(dim)
        d *= 3.0 / np.linalg.norm(d) * np.sqrt(dim)
        for r in rows:
            E[r] = d + spread * rng.standard_normal(dim) * np.sqrt(dim) / 3
    return E


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weak_rows_of_a_group_join_it_by_their_gradient_direction(seed):
    """Half of a planted group harms strongly, half only weakly (its harm does not stand out); all share a direction.
    With the embeddings the group takes its weak half and no bulk row; without them it cannot."""
    strong, weak = PLANTED[:20], PLANTED[20:]
    S = harm_matrix(strong, seed=seed)
    rng = np.random.default_rng(seed)
    for r in weak:
        S[:, r] += 0.6 * (1 + 0.3 * rng.random())  # above the median, below the head cut
    E = _embeddings([PLANTED], seed=seed)
    with_dir = verdict(S, embeddings=E)
    without = verdict(S)
    p, r = precision_recall(with_dir["drop_rows"], PLANTED)
    assert with_dir["kind"] == "concentrated" and p >= 0.9 and r >= 0.9
    _, r0 = precision_recall(without["drop_rows"], PLANTED)
    assert r0 <= 0.7
    off = verdict(S, embeddings=E, policy=VerdictOptions(extend_z=0))
    assert off["drop_rows"] == without["drop_rows"]
    joined = sum(g["by_direction"] for g in with_dir["groups"])
    assert joined == len(set(with_dir["drop_rows"]) - set(without["drop_rows"])) > 0
    assert all(g["by_direction"] == 0 for g in without["groups"])


def test_direction_extension_keeps_two_groups_apart():
    """Two planted groups with their own directions: each extends along its own, never takes the other's rows."""
    a, b = PLANTED[:20], list(range(5, 200, 10))[:20]
    S = harm_matrix(a[:10] + b[:10], seed=3)
    for r in a[10:] + b[10:]:
        S[:, r] += 0.6
    E = _embeddings([a, b], seed=3)
    found = find_culprits(S, S.sum(0), list(range(N)), embeddings=E)
    assert found.concentrated
    rows = set(found.head)
    assert len(rows & set(a + b)) >= 36 and len(rows - set(a + b)) <= 3


def test_local_fdr_head_keeps_the_planted_rows_with_far_fewer_innocent_ones():
    """The local-fdr head (Efron's empirical null) keeps every planted row at 1% and at 20% of the file, with at most
    half the innocent rows a fixed z cut keeps; on pure heavy-tailed noise it keeps at most half as many rows too (the
    resampling check then drops what is left)."""
    from gradian.verdict.stats import local_fdr

    pol, zcut = VerdictOptions(head_fdr=0.2), VerdictOptions(head_fdr=0.0, head_z=2.0)
    for seed in (4, 5, 6):
        for planted in (PLANTED[:4], list(range(0, 400, 5))):
            s = harm_matrix(planted, seed=seed).sum(0)
            head, zhead = set(np.flatnonzero(head_mask(s, pol))), set(np.flatnonzero(head_mask(s, zcut)))
            assert set(planted) <= head, (seed, len(planted))
            assert len(head - set(planted)) <= max(1, len(zhead - set(planted)) / 2), (seed, len(planted))
        noise = harm_matrix((), seed=seed).sum(0)
        assert head_mask(noise, pol).sum() <= head_mask(noise, zcut).sum() / 2
    med = float(np.median(noise))
    fdr = local_fdr(noise, med, 1.4826 * float(np.median(np.abs(noise - med))))
    assert fdr.shape == noise.shape and np.all((fdr >= 0) & (fdr <= 1)) and fdr[np.argmin(np.abs(noise - med))] > 0.5


def test_rank_sum_p_equals_scipy_mann_whitney():
    """The finding test's p is the one-sided Mann-Whitney U test's (normal approximation with continuity and tie
    corrections), with and without ties."""
    from scipy.stats import mannwhitneyu

    from gradian.verdict.stats import rank_sum_p

    rng = np.random.default_rng(0)
    for decimals in (None, 1):
        s = rng.standard_t(3, size=N)
        s = s if decimals is None else np.round(s, decimals)
        masks = [np.zeros(N, dtype=bool) for _ in range(3)]
        for k, m in enumerate(masks):
            m[rng.choice(N, 10 + 40 * k, replace=False)] = True
        s[masks[0]] += 1.0
        ours = rank_sum_p(s, masks)
        for m, p in zip(masks, ours, strict=True):
            ref = mannwhitneyu(s[m], s[~m], alternative="greater", method="asymptotic", use_continuity=True).pvalue
            assert p == pytest.approx(ref, rel=1e-9)
    assert rank_sum_p(s, [np.ones(N, dtype=bool)]) == [1.0]


WIDE = list(range(0, N, 5)) + list(range(1, N, 5))  # 160 rows, 40% of the file


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_a_finding_flags_make_a_group_when_no_head_stands_out(seed):
    """40% of the file harms mildly: the planted rows are the bulk's spread, so no row stands out and without a finding
    the verdict is spread. A mechanical finding flags 150 of them and 10 innocent rows; their harm ranks far above the
    other rows', so they make the group: every row the finding flags (its fix is the finding's), and no row by
    direction alone (the finding names the defect's rows). The report says how it was found."""
    S = harm_matrix(WIDE, seed=seed, strength=1.5)
    assert not head_mask(S.sum(0), VerdictOptions()).any()
    E = _embeddings([WIDE], seed=seed)
    innocent = [r for r in range(N) if r not in set(WIDE)][:10]
    cut = {"code": "D133", "name": "short_answers", "severity": "warning", "cause": "mechanical",
           "evidence": {"rows": WIDE[:150] + innocent}, "fix": "complete the short answers"}  # fmt: skip
    v = verdict(S, [cut], embeddings=E)
    assert v["kind"] == "concentrated" and v["cause"] == "mechanical"
    assert sorted(v["drop_rows"]) == sorted(WIDE[:150] + innocent)
    assert all(g["by_direction"] == 0 for g in v["groups"])
    assert v["confidence"]["basis"] == "finding" and v["confidence"]["level"] == "high"
    assert v["how"]["findings"][0]["code"] == "D133" and v["how"]["findings"][0]["p"] < 1e-6
    assert "No single row's harm stands out" in v["text"] and "D133 short_answers" in v["text"]
    from gradian.report.render import confidence_text

    assert "rest on diagnose findings" in confidence_text(v) and "100% of 200 resamples" in confidence_text(v)
    assert v["how"]["raw_head"] == 0 and v["how"]["basis"] == "finding"
    assert verdict(S, embeddings=E)["kind"] == "spread"
    assert verdict(S, [cut], embeddings=E, policy=VerdictOptions(finding_alpha=0))["kind"] == "spread"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_an_info_note_flags_make_no_group(seed):
    """The same rows and harm as above, flagged by an info finding (a note on what rows share, as diagnose's generic
    opening reused by the eval prompts is): rows that share a topic carry harm as any topic's rows do, so the note
    makes no group, and the verdict is spread; as a warning, the same flags make the group."""
    S = harm_matrix(WIDE, seed=seed, strength=1.5)
    note = {"code": "D105", "name": "train_eval_overlap", "severity": "info", "cause": "content",
            "evidence": {"rows": WIDE[:150], "kind": "generic_prompt"}, "fix": "drop or rewrite them"}  # fmt: skip
    v = verdict(S, [note])
    assert v["kind"] == "spread" and v["drop_rows"] == [] and not v["how"]["findings"]
    warned = verdict(S, [{**note, "severity": "warning"}])
    assert warned["kind"] == "concentrated" and min(precision_recall(warned["drop_rows"], WIDE[:150])) >= 0.9


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_mechanical_group_holds_every_row_its_finding_flags(seed):
    """A loop defect in 30 rows: 22 harm every regressed item, 8 help them (the looped sentence is one these items
    need). The finding flags all 30 and its rows carry the harm, so the group is the finding's rows, the 8 that help
    too: the defect is in them all, and the verdict's fix (drop or cut the looping rows) is the finding's. Without
    the extension the group keeps only rows whose harm stands out or the finding test seeds (harm above the median)."""
    harmful, helping = list(range(0, 220, 10)), list(range(225, 400, 22))
    S = harm_matrix(harmful, seed=seed, helpful=helping)
    loop = {"code": "D129", "name": "repetition", "severity": "warning", "cause": "mechanical",
            "evidence": {"rows": harmful + helping}, "fix": "drop the looping rows"}  # fmt: skip
    assert (S.sum(0)[helping] < np.median(S.sum(0))).all()
    v = verdict(S, [loop])
    assert v["kind"] == "concentrated" and v["cause"] == "mechanical"
    assert set(harmful + helping) <= set(v["drop_rows"])
    assert len(v["drop_rows"]) <= len(harmful + helping) + 2  # a noise row that stands out may ride along
    off = verdict(S, [loop], policy=VerdictOptions(extend_mechanical=False))
    assert set(harmful) <= set(off["drop_rows"]) and not set(helping) & set(off["drop_rows"])


def test_findings_on_innocent_rows_name_no_culprit():
    """Nothing planted, three findings on random rows (5%, 15%, 30% of the file), 20 seeds: the finding test (effect
    size, Bonferroni, resamples) never names them."""
    pol = VerdictOptions(bootstrap=50)
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        S = harm_matrix(seed=100 + seed)
        fs = [{"code": f"D13{k}", "name": "x", "cause": "mechanical" if k % 2 else "content",
               "evidence": {"rows": sorted(rng.choice(N, int(share * N), replace=False).tolist())}}
              for k, share in enumerate((0.05, 0.15, 0.3))]  # fmt: skip
        found = find_culprits(S, S.sum(0), list(range(N)), findings=fs, policy=pol)
        assert not found.concentrated and not found.findings, seed


@pytest.mark.parametrize("seed", [8, 9, 10])
def test_a_group_set_aside_lets_a_second_one_stand_out(seed):
    """A strong group of 25% of the file inflates the bulk's median and spread so that a second, weaker group of 5%
    barely stands out beside it (fewer than 60% of its rows make the first head); set aside what the first group
    explains, and the second's harm stands out from the rest."""
    from gradian.verdict.culprits import stable_head

    strong = list(range(0, N, 4))
    weak = [r for r in range(2, 200, 5) if r % 4][:20]
    S = harm_matrix(strong, seed=seed, strength=12.0)
    rng = np.random.default_rng(seed)
    for r in weak:
        S[:, r] += 2.0 * (1 + 0.3 * rng.random())
    first = stable_head(S, S.sum(0), VerdictOptions())
    assert len(set(np.flatnonzero(first.kept)) & set(weak)) <= 0.6 * len(weak)
    found = find_culprits(S, S.sum(0), list(range(N)))
    assert found.concentrated
    assert len(set(found.head) & set(weak)) >= 0.8 * len(weak)
    assert set(strong) <= set(found.head) and len(set(found.head) - set(strong) - set(weak)) <= 2


def two_defects(seed: int, second: bool = True) -> tuple[np.ndarray, list[int], list[int]]:
    """30 regressed items: a first defect's 40 rows harm items 0-22 strongly, and those items' scores vary five times
    as much for every row (items that regressed a lot have large gradients); rows' gradients differ in size. With
    ``second``, another defect's 20 rows harm items 20-29 mildly; else items 22-29 only drift, the way drifting items
    do: they share a direction, so the rows that point it lead each of them."""
    first, other = list(range(0, N, 10)), list(range(5, N, 20))
    rng = np.random.default_rng(seed)
    scale = np.exp(0.5 * rng.standard_normal(N))
    S = rng.standard_t(3, size=(30, N)) * scale
    hit = 20 if second else 22
    S[:hit] *= 5.0
    for r in first:
        S[:hit, r] += 20.0 * (1 + 0.3 * rng.random())
    if second:
        for r in other:
            S[hit:, r] += 4.0 * (1 + 0.3 * rng.random())
    else:
        S[hit:] += rng.standard_normal(N) * scale
    return S, first, other


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_second_defect_swamped_in_the_sum_is_found_on_the_items_the_first_does_not_drive(seed):
    """The second defect's rows barely stand out in the sum (the first defect's items carry most of its spread), so
    reading the rest over every item misses them; on the items the first group does not drive they stand out, and
    over every item their harm still ranks above the other rows', so they join."""
    S, first, other = two_defects(seed)
    off = find_culprits(S, S.sum(0), list(range(N)), policy=VerdictOptions(driven_z=0))
    assert len(set(off.head) & set(other)) <= 0.5 * len(other)
    found = find_culprits(S, S.sum(0), list(range(N)))
    assert found.concentrated and len(found.undriven) == 1
    u = found.undriven[0]
    assert u.of_items == 30 and u.items <= 12 and u.p < 0.05
    p, r = precision_recall(found.head, first + other)
    assert p >= 0.85 and r >= 0.95
    v = verdict(S)
    assert any("do not drive" in s for s in v["sentences"]) and v["policy"]["driven_z"] == VerdictOptions().driven_z
    assert v["how"]["undriven"] == [{"rows": u.rows, "items": u.items, "of_items": 30, "p": u.p, "z": u.z}]


@pytest.mark.parametrize("seed", range(10))
def test_items_left_to_drift_add_no_rows(seed):
    """The same first defect, and items that only drift: the rows that lead them do not carry the harm over every
    item, so no row joins (without that test, some seeds name 19 innocent rows)."""
    S, first, _ = two_defects(seed, second=False)
    found = find_culprits(S, S.sum(0), list(range(N)))
    assert found.concentrated and not found.undriven
    p, r = precision_recall(found.head, first)
    assert p >= 0.85 and r >= 0.95


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_second_defects_finding_is_read_on_the_rest(seed):
    """Two defects: 20 content rows harm strongly and stand out; 40 rows a mechanical finding flags harm mildly. Over
    all the harm the flagged rows carry under ``enrichment`` x their share of the rows (the content rows take most of
    it), so the first reading names the content group alone; read again without it, the flagged rows carry the rest's
    harm, and the verdict names both. The family of finding tests grows with each reading (one Bonferroni level)."""
    content, mech = list(range(0, N, 20)), list(range(5, N, 10))
    S = harm_matrix(content, seed=seed, strength=8.0)
    rng = np.random.default_rng(seed + 100)
    for r in mech:
        S[:, r] += 1 + 0.3 * rng.random()
    pos, flagged = np.clip(S.sum(0), 0, None), np.isin(np.arange(N), mech)
    assert pos[flagged].sum() / pos.sum() < VerdictOptions().enrichment * flagged.mean()
    cut = {"code": "D133", "name": "short_answer", "severity": "warning", "cause": "mechanical",
           "evidence": {"rows": mech}, "fix": "restore the answers"}  # fmt: skip
    v = verdict(S, [cut], embeddings=_embeddings([content, mech], seed=seed))
    assert v["kind"] == "concentrated" and v["cause"] == "mechanical+content"
    p, r = precision_recall(v["drop_rows"], content + mech)
    assert p >= 0.95 and r >= 0.95
    rows_of = [set(g["rows"]) for g in v["groups"]]
    assert sum(map(len, rows_of)) == len(set().union(*rows_of)) == len(v["drop_rows"])  # no row in two groups
    read_later = [f for f in v["how"]["findings"] if f["code"] == "D133"]
    assert read_later and read_later[0]["on_rest"]  # found on the rest, not in the first reading
    assert f"With the rows that stand out set aside, the {read_later[0]['rows']} rows diagnose flags" in v["text"]
    assert f"in {round(100 * read_later[0]['frequency'])}% of the resamples" in v["text"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_light_content_group_beside_a_mechanical_one_is_set_aside_not_named(seed):
    """A mechanical defect's 12 flagged rows harm every item; 4 other rows harm 3 of the 12 items strongly. Those 4
    stand out in the sum and no finding flags them, a quarter of the head rows: a content group by count, but one
    that carries under ``min_head_share`` of the harm. They are set aside and listed to read, not named; the same
    rows carrying more harm are named (their group is a second defect)."""
    mech, riders = list(range(0, 396, 33)), [5, 105, 205, 305]
    cut = {"code": "D133", "name": "short_answer", "severity": "warning", "cause": "mechanical",
           "evidence": {"rows": mech}, "fix": "restore the answers"}  # fmt: skip
    S = harm_matrix(mech, seed=seed)
    S[:3, riders] += 14.0
    pos = np.clip(S.sum(0), 0, None)
    assert pos[riders].sum() / pos.sum() < VerdictOptions().min_head_share
    off = find_culprits(S, S.sum(0), list(range(N)), findings=[cut], policy=VerdictOptions(min_head_share=0.0))
    assert {g.cause for g in off.groups} == {"mechanical", "content"}  # without the rule they are named
    v = verdict(S, [cut])
    assert v["kind"] == "concentrated" and v["cause"] == "mechanical"
    assert sorted(v["drop_rows"]) == mech
    aside = v["how"]["set_aside"]
    assert len(aside) == 1 and aside[0]["harm_share"] < VerdictOptions().min_head_share
    assert set(riders) <= set(aside[0]["rows"]) and len(aside[0]["rows"]) <= len(riders) + 1  # a noise row may lead too
    n = len(aside[0]["rows"])
    assert any(f"Beside the mechanical group, {n} rows that no finding flags" in s for s in v["sentences"])
    assert rows_to_read(Verdict.from_dict(v))[-1][1] == aside[0]["rows"]
    S[:, riders] += 14.0  # now they harm every item: a second defect, named
    v = verdict(S, [cut])
    assert v["cause"] == "mechanical+content" and set(mech + riders) <= set(v["drop_rows"])
    assert precision_recall(v["drop_rows"], mech + riders)[0] >= 0.85 and not v["how"]["set_aside"]


def _texts(term_rows, *, seed=0, term="zorblax"):
    """One short text per row from a 300-word vocabulary; ``term_rows`` also hold ``term``."""
    rng = np.random.default_rng(seed)
    vocab = [f"word{k}" for k in range(300)]
    out = {}
    for r in range(N):
        words = list(rng.choice(vocab, size=12))
        out[r] = " ".join(words + ([term] if r in term_rows else []))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_past_the_group_that_hold_its_term_are_hinted_not_dropped(seed):
    """A defect whose rows mostly harm too little each to stand out (a one-word swap diluted by its row): 10 rows
    stand out and name the group, the other 40 hold the same term with a weak harm. The verdict drops the 10 and
    points at the 40 as rows to read, not to drop."""
    strong, weak = list(range(0, N, 40)), list(range(7, N, 10))
    S = harm_matrix(strong, seed=seed, strength=8.0)
    rng = np.random.default_rng(seed + 7)
    for r in weak:
        S[:, r] += 0.5 + 0.2 * rng.random()
    v = verdict(S, texts=_texts(set(strong) | set(weak), seed=seed))
    assert v["kind"] == "concentrated" and "zorblax" in v["groups"][0]["terms"]
    p, r = precision_recall(v["drop_rows"], strong + weak)
    assert p >= 0.9 and precision_recall(v["drop_rows"], strong)[1] == 1.0
    assert len(v["drop_rows"]) <= len(strong) + 0.1 * len(weak)  # the weak rows are not dropped
    (hint,) = v["how"]["hints"]
    assert hint["term"] == "zorblax" and not set(hint["rows"]) & set(v["drop_rows"])
    hp, hr = precision_recall(set(hint["rows"]) | set(v["drop_rows"]), weak)
    assert set(hint["rows"]) <= set(weak) and hr >= 0.8
    assert f'{hint["size"]} rows hold "zorblax", a term the named rows share (p = ' in v["text"]
    assert any("Rows to read" in s and "zorblax" in s for s in v["next_steps"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_term_innocent_rows_also_hold_is_no_hint(seed):
    """The named rows' term also appears in 40 rows whose harm is noise: no hint."""
    strong, innocent = list(range(0, N, 40)), list(range(7, N, 10))
    S = harm_matrix(strong, seed=seed, strength=8.0)
    v = verdict(S, texts=_texts(set(strong) | set(innocent), seed=seed))
    assert v["kind"] == "concentrated" and "zorblax" in v["groups"][0]["terms"]
    assert v["how"]["hints"] == [] and "Rows to read" not in " ".join(v["next_steps"])


def _profiles(s, on_token, *, token="he", holders=200, seed=0, share=0.1, none=()):
    """Token profiles of the top 30% rows by ``s``: the rows in ``on_token`` put 60-80% of their positive harm on
    ``token``, the rows in ``none`` nothing, the others ``share`` of it; the rest sits on words from a 300-word
    vocabulary."""
    rng = np.random.default_rng(seed)
    top = np.argsort(-s)[: int(0.3 * len(s))]
    rows = {}
    for r in top.tolist():
        pos = abs(float(s[r])) + 1.0
        on = (0.6 + 0.2 * rng.random()) if r in on_token else 0.0 if r in none else share
        a, b = rng.choice(300, size=2, replace=False)
        rows[r] = (pos, {token: on * pos, f"w{a}": (1 - on) * 0.6 * pos, f"w{b}": (1 - on) * 0.4 * pos})
    return TokenProfiles(rows, {token: holders} | {f"w{k}": 30 for k in range(300)})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_content_group_takes_the_rows_whose_harm_sits_on_its_tokens(seed):
    """A pronoun flip's 20 strongest rows stand out; 20 more carry a little harm each (above the median, under the
    head's cut), all on the same token. With the rows' token profiles the group takes the 20 weak rows too; innocent
    rows with as much harm elsewhere stay out. Where most rows holding the token put their harm on it (a label such
    as " sad."), it is what the rows are, and the group takes nobody by it. The tokens never make harm concentrated."""
    strong, weak = list(range(0, N, 20)), list(range(7, N, 20))
    S = harm_matrix(strong, seed=seed, strength=8.0)
    rng = np.random.default_rng(seed + 7)
    for r in weak:
        S[:, r] += 0.8 + 0.2 * rng.random()
    s = S.sum(0)
    above = [r for r in weak if s[r] > np.median(s)]  # the rows the tokens may add
    plain = verdict(S)
    assert plain["kind"] == "concentrated" and precision_recall(plain["drop_rows"], weak)[1] <= 0.25
    v = verdict(S, token_profiles=_profiles(s, set(strong + weak), seed=seed))
    p, r = precision_recall(v["drop_rows"], strong + weak)
    assert p >= 0.95 and r >= 0.9 and precision_recall(v["drop_rows"], above)[1] >= 0.9
    (g,) = v["groups"]
    assert g["tokens"] == ["he"] and g["by_tokens"] >= 0.5 * len(weak) and g["token_hold"] < 0.5
    assert TOKEN_PROFILES_HINT in plain["next_steps"] and TOKEN_PROFILES_HINT not in v["next_steps"]
    assert (
        "because their harm sits on the group's tokens" in v["text"]
        and "Most of their harm sits on the token 'he'" in v["text"]
    )
    # a label: most of the 60 rows that hold " sa" put their harm there, the innocent ones too
    label = verdict(S, token_profiles=_profiles(s, set(strong + weak), token="sa", holders=60, share=0.9, seed=seed))
    assert label["drop_rows"] == plain["drop_rows"] and label["groups"][0]["token_hold"] >= 0.5
    assert "the tokens mark what these rows are" in label["text"]
    noise = harm_matrix(seed=seed)
    quiet = verdict(noise, token_profiles=_profiles(noise.sum(0), set(range(0, N, 3)), seed=seed))
    assert quiet["kind"] == "spread" and quiet["drop_rows"] == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_content_group_lets_go_of_rows_with_no_harm_on_its_tokens(seed):
    """20 planted rows put their harm on " he"; 6 innocent rows stand out beside them as strongly, on other words
    (they lead other items). Without token profiles all 26 are named; with them the 6 leave the group
    (``off_tokens``) and the verdict says why. Should letting them go leave the rest under the share a culprit group
    needs, the tokens do not undo the decision: the group stays as it was."""
    from gradian.options.verdict import VerdictOptions

    planted, innocent = list(range(0, N, 20)), list(range(5, 125, 20))
    S = harm_matrix(planted + innocent, seed=seed, strength=8.0)
    s = S.sum(0)
    plain = verdict(S)
    assert set(innocent) <= set(plain["drop_rows"])
    prof = _profiles(s, set(planted), none=set(innocent), seed=seed)
    v = verdict(S, token_profiles=prof)
    assert v["kind"] == "concentrated" and sorted(v["drop_rows"]) == planted
    (g,) = v["groups"]
    assert g["tokens"] == ["he"] and sorted(g["off_tokens"]) == innocent
    assert "6 rows that stood out beside them put none of their harm on it" in v["text"]
    strict = VerdictOptions(min_head_share=0.9)  # 26 rows carry 92-93% of the harm, the planted 20 70-71%
    S = harm_matrix(planted + innocent, seed=seed, strength=30.0)
    s = S.sum(0)
    kept = verdict(S, token_profiles=_profiles(s, set(planted), none=set(innocent), seed=seed), policy=strict)
    assert kept["kind"] == "concentrated" and sorted(kept["drop_rows"]) == sorted(planted + innocent)
    assert kept["groups"][0]["off_tokens"] == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_content_group_left_light_by_its_tokens_is_set_aside(seed):
    """Beside a mechanical defect's 12 flagged rows, 4 rows harm 3 items on " he" and 1 row harms 3 other items as
    much on other words. Together they carry over ``min_head_share`` of the harm: a second defect by share. The token
    profiles let the fifth row go (none of its harm is on " he"), and the 4 left carry under it: the same rule that
    sets a light content group aside beside a mechanical one sets this one aside, instead of naming what is left."""
    mech, riders, off = list(range(0, 396, 33)), [5, 105, 205, 305], 155
    cut = {"code": "D133", "name": "short_answer", "severity": "warning", "cause": "mechanical",
           "evidence": {"rows": mech}, "fix": "restore the answers"}  # fmt: skip
    S = harm_matrix(mech, seed=seed)
    S[:3, riders] += 36.0
    S[3:6, off] += 36.0
    s = S.sum(0)
    pos, share = np.clip(s, 0, None), VerdictOptions().min_head_share
    assert pos[riders].sum() / pos.sum() < share < pos[[*riders, off]].sum() / pos.sum()
    plain = verdict(S, [cut])
    assert plain["cause"] == "mechanical+content" and set(riders) | {off} <= set(plain["drop_rows"])
    v = verdict(S, [cut], token_profiles=_profiles(s, set(riders), none={off}, seed=seed))
    assert v["cause"] == "mechanical" and sorted(v["drop_rows"]) == mech
    (aside,) = v["how"]["set_aside"]
    assert set(riders) <= set(aside["rows"]) and aside["off_tokens"] == [off] and aside["harm_share"] < share
    assert any(f"Beside the mechanical group, {len(aside['rows'])} rows that no finding flags" in x
               for x in v["sentences"])  # fmt: skip


def test_harm_tokens_are_the_few_keys_that_carry_half_the_harm():
    """A group's harm tokens: the fewest keys carrying half its rows' positive harm, and none when that takes more keys
    than a profile keeps per row (harm spread over the rows' words is no token's)."""
    from gradian.attribute.token_profiles import KEYS_PER_ROW
    from gradian.verdict.harm_tokens import harm_tokens

    on_he = TokenProfiles({r: (10.0, {"he": 4.0, "his": 2.0, f"w{r}": 4.0}) for r in range(6)}, {})
    assert harm_tokens(range(6), on_he, 0.5) == ["he", "his"]  # 4 + 2 of 10 per row; "he" alone carries 40%
    assert harm_tokens(range(6), on_he, 0.4) == ["he"]
    spread = TokenProfiles(
        {r: (10.0, {f"w{r}_{k}": 10.0 / KEYS_PER_ROW for k in range(KEYS_PER_ROW)}) for r in range(6)}, {}
    )
    assert harm_tokens(range(6), spread, 0.5) == []  # half the harm takes 24 keys
    assert harm_tokens(range(1), spread, 0.5) == [f"w0_{k}" for k in range(KEYS_PER_ROW // 2)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_findings_rows_that_carry_the_harm_need_no_share_of_a_large_files_harm(seed):
    """1,200 rows, 60 of them (5%) looping, each adding a little harm to every regressed item: together they carry
    12-16% of the positive harm, under ``min_head_share``, because the other 1,140 rows' noise adds positive harm too.
    The finding test finds them carrying it (3x their share, by rank, in the resamples), and that is the evidence the
    share bar stands for: the group is named. The same harm with no finding, or the finding on 60 innocent rows, names
    nobody."""
    n, loops = 1200, list(range(0, 1200, 20))
    rng = np.random.default_rng(seed)
    S = rng.standard_t(3, size=(30, n))
    S[:, loops] += 0.4
    s = S.sum(0)
    pos = s.clip(min=0)
    assert pos[loops].sum() / pos.sum() < VerdictOptions().min_head_share
    flag = {"code": "D129", "name": "repetition", "severity": "error", "cause": "mechanical", "fix": "drop them"}
    found = find_culprits(S, s, list(range(n)), findings=[{**flag, "evidence": {"rows": loops}}])
    assert found.concentrated and sorted(found.head) == loops and found.groups[0].cause == "mechanical"
    assert found.head_share < VerdictOptions().min_head_share and "D129 flags rank above the others" in found.reason
    assert not find_culprits(S, s, list(range(n))).concentrated
    innocent = sorted(rng.choice([r for r in range(n) if r % 20], 60, replace=False).tolist())
    assert not find_culprits(S, s, list(range(n)), findings=[{**flag, "evidence": {"rows": innocent}}]).concentrated


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_spread_harm_that_one_labels_rows_carry_leads_to_their_labels_not_to_drop_rows(seed):
    """100 rows labelled "sad." (10 of them flipped) each add a little harm to every regressed item: no row stands
    out, so the verdict is spread, but as a set the label's rows carry the harm, and the verdict says so and lists
    them to check, most harmful first, without naming them to drop. The other label's rows (no harm) make no lead;
    neither does the same harm read without labels, nor labels on rows that carry nothing."""
    sad, flipped = list(range(0, N, 4)), list(range(0, N, 40))
    S = harm_matrix(seed=seed)
    S[:, sad] += 0.5
    S[:, flipped] += 0.5
    s = S.sum(0)

    def read(labels):
        rows = [{**e, "label": labels.get(e["index"])} for e in examples(s)]
        return make_verdict([], [], rows, regressed(S.shape[0]), item_scores=S, item_rows=range(N)).to_dict()

    happy = {r: "happy." for r in range(2, N, 4)}
    v = read({r: "sad." for r in sad} | happy)
    assert v["kind"] == "spread" and not v["drop_rows"]
    (lead,) = v["how"]["leads"]
    assert lead["label"] == "sad." and sorted(lead["rows"]) == sad and lead["harm_share"] > 0.25
    assert lead["rows"] == sorted(sad, key=lambda r: -s[r])
    assert "It leans on one label" in v["text"] and "Check the labels of the 100 rows" in v["next_steps"][0]
    assert any(label.startswith("Labels to check") for label, _ in rows_to_read(Verdict.from_dict(v)))
    plain = read({})
    assert plain["kind"] == "spread" and not plain["how"]["leads"]
    assert plain["next_steps"] == ["No rows stand out to drop; try a lower learning rate or fewer epochs, or mix in "
                                   "data like the regressed eval items.", SPREAD_THIN]  # fmt: skip
    assert not read({r: "sad." for r in range(1, N, 4)} | happy)["how"]["leads"]
