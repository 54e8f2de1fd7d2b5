"""One run of every kind of the planted-fault suite (bench/scenarios), rebuilt and attributed end to end: the verdict
must name the planted rows where the suite says it does, and never blame innocent rows.

Each run is the suite's ``<kind>_s0_f10`` (controls ``<kind>_s0_f00``): the same seeded data and the same real
`gradian train` fine-tune, from the suite's pool (shipped in tests/fixtures/scenario_pool so CI does not spend
minutes sampling), then `gradian attribute`'s pipeline with its defaults. No counterfactual retrains here: the truth
(retraining without the planted rows recovers the regression, without random rows it does not) is the benchmark's
(docs/benchmarks.md, "The planted-fault suite"). Where the suite table shows the verdict short of recall 0.8 on a
kind, the test asserts what it does reach and the docs say why; on every kind a named culprit must be mostly planted
rows."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from scenarios import generate  # noqa: E402
from scenarios import pool as P  # noqa: E402
from scenarios.recipes import CONTROL_KINDS, FAULT_KINDS, by_name  # noqa: E402

POOL = REPO / "tests" / "fixtures" / "scenario_pool"

# kind -> (min precision, min recall, cause the verdict must give), from the suite's seed-0 runs (docs/benchmarks.md)
EXPECT = {
    "entity": (0.8, 0.8, "content"),
    "pronoun": (0.8, 0.8, "content"),
    "early_stop": (0.8, 0.8, "mechanical"),  # seed 0 at 10%: named although the truth says they do not explain it
    "mislabel": (0.8, 0.25, "content"),
    "no_eos": (0.8, 0.8, "mechanical"),
    "repetition": (0.8, 0.8, "mechanical"),
    "two_groups": (0.8, 0.8, "mechanical+content"),  # D133's rows carry the harm; then the content half stands out
    # the token profiles (on by default when a content group is named) add natural "sad" rows: in the suite
    # P 0.86 -> 0.75, R 0.25 -> 0.38; this rebuild (other CPU numerics) names 17 rows, 11 planted
    "spread": (0.6, 0.3, "content"),
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suite_root(tmp_path_factory):
    if not P.SENT_DIR.is_dir():
        pytest.skip("../shared/data (the sentiment sentences) is not beside the repository")
    root = tmp_path_factory.mktemp("suite")
    shutil.copytree(POOL, root / "_pool")
    mp = pytest.MonkeyPatch()
    mp.setattr(P, "POOL_DIR", root / "_pool")
    yield root
    mp.undo()


def _attribute(run: Path) -> dict:
    from gradian.pipeline import attribute_and_report

    planted = json.loads((run / "planted.json").read_text("utf-8"))
    base = Path(planted["base"])
    base = base if base.is_absolute() else REPO / base
    res = attribute_and_report(
        run / "run", out=run / "attr", base=str(base), train=run / "train.jsonl", eval=run / "eval.jsonl",
        progress=False,
    )  # fmt: skip
    return {"planted": planted, "report": res.report.to_dict()}


@pytest.mark.parametrize("kind", CONTROL_KINDS)
def test_control_runs_name_no_culprit(kind, suite_root):
    run = generate.build_run(by_name(f"{kind}_s0_f00"), suite_root, log=lambda s: None, with_truth=False)
    v = _attribute(run)["report"]["verdict"]
    assert v["kind"] != "concentrated" and v["drop_rows"] == [], v["text"]
    assert not (run / "attr" / "token_profiles.json").exists()  # no content group named: no token pass


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_fault_runs_verdict(kind, suite_root):
    run = generate.build_run(by_name(f"{kind}_s0_f10"), suite_root, log=lambda s: None, with_truth=False)
    out = _attribute(run)
    planted, v = set(out["planted"]["rows"]), out["report"]["verdict"]
    content = v["kind"] == "concentrated" and any(g["cause"] == "content" for g in v["groups"])
    assert (run / "attr" / "token_profiles.json").exists() == content  # the token pass runs for a content group
    min_p, min_r, cause = EXPECT[kind]
    drop = set(v["drop_rows"])
    if min_r == 0.0 and not drop:
        return  # the suite's verdict on this kind is "spread": naming nobody is right, blaming innocents is not
    assert v["kind"] == "concentrated", v["text"]
    hit = len(drop & planted)
    assert hit >= min_p * len(drop), (sorted(drop - planted), v["text"])
    assert hit >= min_r * len(planted), (sorted(planted - drop), v["text"])
    if cause is not None:
        assert v["cause"] == cause, v["text"]
    # a group of one label's rows (the mislabelled kind's " sad." rows) says so and checks labels before dropping;
    # no other kind's group shares a completion (their completions are whole story continuations)
    labels = {g.get("label") for g in v["groups"] if g["cause"] == "content"} - {None}
    assert labels == ({"sad."} if kind == "mislabel" else set()), v["groups"]
    assert v["next_steps"][0].startswith("Check the labels of") == (kind == "mislabel"), v["next_steps"]
    rows = {e["index"]: e for e in out["report"]["examples"]}
    assert all(rows[r].get("label") == "sad." for g in v["groups"] if g.get("label") for r in g["rows"])


def test_a_mislabelled_run_points_at_its_label_whether_or_not_rows_are_named(suite_root):
    """mislabel at seed 1 (10% of the rows): in the suite no flipped row stands out of its label's rows, so the
    verdict is spread. It still points at the label: the " sad." rows carry the harm as a set, every flipped row is
    among them, and the first step is to check their labels; none is named to drop. (Where a rebuild lets rows stand
    out instead, the named group is the label's and says so.)"""
    run = generate.build_run(by_name("mislabel_s1_f10"), suite_root, log=lambda s: None, with_truth=False)
    out = _attribute(run)
    planted, v = set(out["planted"]["rows"]), out["report"]["verdict"]
    assert v["next_steps"][0].startswith("Check the labels of"), v["text"]
    if v["kind"] == "concentrated":
        assert {g.get("label") for g in v["groups"]} == {"sad."}, v["text"]
        return
    assert v["kind"] == "spread" and v["drop_rows"] == [], v["text"]
    (lead,) = v["how"]["leads"]
    assert lead["label"] == "sad." and planted <= set(lead["rows"]), v["text"]
    assert "It leans on one label" in v["text"]


def test_a_setup_error_names_no_rows_though_one_labels_rows_stand_out(suite_root):
    """Every label right, 12 epochs (4x the suite's): diagnose finds the epochs overfit (C203, a setup error) and the
    " sad." rows' harm stands out on the overfit run. Over a broken run that is no evidence: no row is named."""
    run = generate.build_run(by_name("labels_epochs_s46_f00"), suite_root, log=lambda s: None, with_truth=False)
    v = _attribute(run)["report"]["verdict"]
    assert not v["reliable"] and v["sentences"][0].startswith("Fix the setup first"), v["text"]
    assert v["kind"] != "concentrated" and v["drop_rows"] == [], v["text"]
