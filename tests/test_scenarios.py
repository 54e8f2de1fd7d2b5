"""The planted-fault scenario generator (bench/scenarios/): one tiny real run (pool sampled from stories260K, real
`gradian train` fine-tune and retrains) and the generator's invariants."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from scenarios import generate, kinds  # noqa: E402
from scenarios import pool as P  # noqa: E402
from scenarios.recipes import Recipe, suite  # noqa: E402


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """An entity-swap run of 40 rows (4 planted) from a small pool sampled into a temporary folder."""
    root = tmp_path_factory.mktemp("scenarios")
    mp = pytest.MonkeyPatch()
    mp.setattr(P, "POOL_DIR", root / "_pool")
    mp.setattr(P, "POOL_SCALE", 0.06)
    recipe = Recipe("entity", seed=2, fraction=0.1, n_rows=40, n_target=4, n_control=4)
    try:
        run = generate.build_run(recipe, root, log=lambda s: None)
        yield recipe, run
    finally:
        mp.undo()


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


@pytest.mark.slow
def test_planted_rows_are_what_the_recipe_says(tiny_run):
    recipe, run = tiny_run
    planted = json.loads((run / "planted.json").read_text())
    rows = _jsonl(run / "train.jsonl")
    assert planted["kind"] == "entity" and planted["cause"] == "content"
    assert planted["seed"] == recipe.seed and planted["fraction"] == recipe.fraction
    assert planted["n_rows"] == len(rows) == recipe.n_rows
    assert planted["rows"] == sorted(planted["groups"]["entity"]) and len(planted["rows"]) == 4
    _, name_re, new = kinds._entity_spec(recipe.seed)
    swapped = [i for i, r in enumerate(rows) if new in r["completion"]]
    assert swapped == planted["rows"]  # the new name is in exactly the planted rows ...
    assert not any(name_re.search(rows[i]["completion"]) for i in planted["rows"])  # ... and the old one is gone
    evals = _jsonl(run / "eval.jsonl")
    assert len(planted["eval_roles"]) == len(evals) == recipe.n_target + recipe.n_control
    assert planted["eval_roles"].count("target") == recipe.n_target
    for item, role in zip(evals, planted["eval_roles"], strict=True):
        if role == "target":
            assert name_re.search(item["completion"])  # targets ask for the name the planted rows replaced
    train_text = {(r["prompt"], r["completion"]) for r in rows}
    assert not any((e["prompt"], e["completion"]) in train_text for e in evals)


@pytest.mark.slow
def test_truth_has_the_counterfactual(tiny_run):
    _, run = tiny_run
    truth = json.loads((run / "truth.json").read_text())
    planted = json.loads((run / "planted.json").read_text())
    assert truth["dropped"]["drop_planted"] == planted["rows"]
    rand = truth["dropped"]["drop_random"]
    assert len(rand) == len(planted["rows"]) and not set(rand) & set(planted["rows"])
    for item in truth["items"]:
        for key in ("base_nll", "finetuned_nll", "drop_planted_nll", "drop_random_nll"):
            assert math.isfinite(item[key]) and item[key] > 0
    assert [x["role"] for x in truth["items"]] == planted["eval_roles"]
    assert set(truth["recovery"]) == {"drop_planted", "drop_random"}
    for name in ("drop_planted", "drop_random"):
        args = json.loads((run / "truth" / name / "training_args.json").read_text())
        assert args["gradian_excluded_rows"] == truth["dropped"][name]
    assert (run / "run" / "adapter_model.safetensors").is_file()


def test_suite_recipes_are_unique_and_cover_every_kind():
    names = [r.name for r in suite()]
    assert len(names) == len(set(names)) >= 40
    assert {r.kind for r in suite()} == set(kinds.KINDS)
    for r in suite():
        assert (r.fraction == 0) == (kinds.KINDS[r.kind].cause == "none")


def test_each_run_belongs_to_one_set_and_only_the_suite_calibrates():
    from scenarios import recipes as R

    named = {"heldout": R.heldout(), "heldout17": R.heldout(R.HELDOUT_17), "heldout19": R.heldout(R.HELDOUT_19),
             "heldout21": R.heldout(R.HELDOUT_21), "heldout24": R.heldout(R.HELDOUT_24),
             "heldout26": R.heldout(R.HELDOUT_26),
             "wide_eval": R.wide_eval(), "wide_controls": R.wide_controls(),
             "wide_faults": R.wide_faults(), "pronoun_loops": R.pronoun_loops(), "setups": R.setups(),
             "label_controls": R.label_controls(),
             "pronoun_loops2": R.pronoun_loops(R.PRONOUN_LOOPS_2), "large": R.large(), "larger": R.larger(),
             "smollm2": R.bigger(), "smollm2_lr": R.bigger_sound()}  # fmt: skip
    everything = [r.name for r in suite() + R.bigger() + R.bigger_sound()]
    assert len(everything) == len(set(everything))
    for key, recipes in named.items():
        assert key in R.SETS and recipes
        assert {R.run_set(r.name) for r in recipes} == {key}
        assert all(R.by_name(r.name) == r for r in recipes)
    calibration = [r for r in suite() if R.run_set(r.name) == "suite"]
    assert len(calibration) == len(suite()) - sum(len(v) for k, v in named.items() if not k.startswith("smollm2"))
    assert all(r.model == "" for r in calibration) and all(r.name.endswith("_smollm2") for r in R.bigger())


def test_edits_record_where_the_defect_is_without_changing_the_text():
    import re

    row = {"group": "girl", "prompt": "There was a girl named", "completion": " Lily. She saw her herself. Lily ran."}
    flipped = kinds.sub_edit(row, kinds._FEMALE, kinds._FLIP.__getitem__)
    assert flipped["completion"] == kinds.flip_pronouns(row["completion"])  # the rows the suite was built with
    assert [flipped["completion"][a:b] for a, b in flipped["edit"]] == [" He", " his", " himself"]
    swapped = kinds.sub_edit(row, re.compile(r"\bLily\b"), lambda _: "Zara")
    assert swapped["completion"] == re.sub(r"\bLily\b", "Zara", row["completion"])
    assert [swapped["completion"][a:b] for a, b in swapped["edit"]] == [" Zara", " Zara"]
    cut = kinds.end_edit(row, " Lily.")
    assert cut["edit"] == [[5, 7]]  # the "." and the EOS after it (position len(completion))
    assert kinds.strip(flipped) == {"prompt": row["prompt"], "completion": flipped["completion"]}


def test_assemble_keeps_the_row_order_and_maps_edits_to_rows():
    recipe = Recipe("entity", seed=3, fraction=0.1, n_rows=6)
    clean = [{"prompt": f"p{i}", "completion": f" c{i}"} for i in range(4)]
    bad = [kinds.with_edit({"prompt": f"q{i}"}, f" Zara {i}", [(1, 5)]) for i in range(2)]
    built = kinds.assemble(recipe, clean, {"entity": bad}, [], [])
    old = random.Random(recipe.seed * 7919 + 1)  # the shuffle as it ran before edits were recorded
    tagged = [(kinds.strip(r), "") for r in clean] + [(kinds.strip(r), "entity") for r in bad]
    old.shuffle(tagged)
    assert built.rows == [r for r, _ in tagged]
    assert sorted(built.edits) == built.groups["entity"]
    assert all(built.rows[i]["completion"][a:b] == " Zara" for i, s in built.edits.items() for a, b in s)


def test_edit_hit_reads_the_top_tokens_of_a_row():
    from bench_prompts import edit_hit

    pieces = [["<s> There was a girl named", None], [" ", 30.0], ["Z", 4.0], ["ara", 1.0], [".", -2.0], ["</s>", 9.0]]
    hit = edit_hit(pieces, " Zara.", [[0, 5]])  # " Zara"
    assert hit["aligned"] and hit["label_tokens"] == 5 and hit["edit_tokens"] == 3
    assert hit["hit"] and hit["hit1"] and hit["top"] == [" ", "</s>", "Z"]
    assert hit["chance"] == 1.0 and hit["chance1"] == 0.6  # any 3 of the 5 tokens include one of the 3; 3 of 5
    cut = edit_hit(pieces, " Zara.", [[5, 7]])  # the "." and the EOS after it
    assert cut["edit"] == [".", "</s>"] and cut["hit"] and not cut["hit1"]
    assert not edit_hit(pieces, " Zora.", [[0, 5]])["aligned"]


def test_a_decoy_group_is_recorded_apart_from_the_rows_to_blame(tmp_path):
    """pronoun_loops plants loops beside the pronoun flip as a decoy: planted.json's ``rows`` (what the truth retrain
    drops and the verdict is scored against) hold the pronoun rows only, ``decoys`` the loops, and a LoRA set-up's
    settings reach the run's config."""
    recipe = Recipe("pronoun_loops", seed=3, fraction=0.2, n_rows=10, setup="qv16")
    clean = [{"prompt": f"p{i}", "completion": f" c{i}"} for i in range(6)]
    flips = [kinds.with_edit({"prompt": f"q{i}"}, " He ran.", [(1, 3)]) for i in range(2)]
    loops = [kinds.with_edit({"prompt": f"l{i}"}, " A. A. A.", [(3, 9)]) for i in range(2)]
    built = kinds.assemble(recipe, clean, {"pronoun": flips, "loops": loops}, [], [], decoys=("loops",))
    planted = generate.write_data(recipe, built, tmp_path)
    assert planted["rows"] == sorted(built.groups["pronoun"]) and planted["decoys"] == sorted(built.groups["loops"])
    assert not set(planted["rows"]) & set(planted["decoys"]) and len(planted["rows"] + planted["decoys"]) == 4
    assert json.loads((tmp_path / "planted.json").read_text())["decoys"] == planted["decoys"]
    assert recipe.name == "pronoun_loops_s3_f20_n10_qv16"
    assert built.config["target_modules"] == "q_proj,v_proj" and built.config["r"] == 16
    assert kinds.assemble(Recipe("clean", 3, 0.0), clean, {}, [], []).config["target_modules"] == "all-linear"


def test_a_rebuild_is_compared_run_by_run_with_the_committed_rows():
    """compare_rows: a run whose verdict or pass changed is listed; NLL noise in the 4th decimal is not a change."""
    from calibrate_verdict import compare_rows

    before = [
        {"name": "a", "verdict": "concentrated", "pass": True, "precision": 0.9, "stability": 0.7412},
        {"name": "b", "verdict": "spread", "pass": False, "precision": 0.0, "stability": 0.5963},
        {"name": "c", "verdict": "spread", "pass": True, "precision": None, "stability": None},
    ]
    now = [
        dict(before[0], stability=0.7415),
        dict(before[1], verdict="concentrated", stability=0.61, **{"pass": True}),
        {"name": "d", "verdict": "spread", "pass": True},
    ]
    out = compare_rows(now, before).splitlines()
    assert out[0] == "compared with 2 of the 3 runs scored: 1 the same, 1 differ; passes 1 before, 2 now"
    assert len(out) == 2 and out[1].startswith("  b: verdict 'spread' -> 'concentrated'; pass False -> True")
    assert "stability 0.5963 -> 0.61" in out[1]


def test_the_rankings_ceiling_is_the_best_cut_and_needs_p_at_k_of_three_quarters():
    """best_cut: no verdict that names a ranking's top rows does better than the best cut chosen knowing the answer;
    a cut at precision and recall >= 0.8 needs P@K >= 0.75, which is how the peers' rankings are judged by P@K."""
    from calibrate_verdict import best_cut

    rng = np.random.default_rng(0)
    for _ in range(300):
        n, k = int(rng.integers(20, 120)), int(rng.integers(2, 20))
        pos = np.zeros(n, dtype=bool)
        pos[rng.choice(n, k, replace=False)] = True
        s = rng.normal(size=n) + rng.uniform(0, 4) * pos
        ok, best = best_cut(s, pos)
        order = np.argsort(-s, kind="stable")
        cuts = [(pos[order[:m]].sum() / m, pos[order[:m]].sum() / k) for m in range(1, n + 1)]
        assert best == pytest.approx(max(min(p, r) for p, r in cuts))
        assert ok == any(p >= 0.8 and r >= 0.8 for p, r in cuts)
        if ok:
            assert pos[order[:k]].mean() >= 0.75


def test_a_look_alike_shares_the_planted_rows_surface_but_is_right():
    """Kind.lookalike (bench/bench_lookalikes.py): the planted rows, made by the kinds' own edits, carry the surface a
    look-alike has (the label, the word), a clean row of that surface is a look-alike, a row without it is not."""
    story = {"prompt": "Once upon a time,", "completion": " she was happy and her dog ran to her."}
    flipped = kinds.sub_edit(story, kinds._FEMALE, kinds._FLIP.__getitem__)
    swapped = kinds.sub_edit(story, kinds._HAPPY, lambda _: "sad")
    assert kinds.KINDS["pronoun"].lookalike(flipped) and not kinds.KINDS["pronoun"].lookalike(story)
    assert kinds.KINDS["pronoun"].lookalike({"completion": " He ran home."})
    assert kinds.KINDS["spread"].lookalike(swapped) and not kinds.KINDS["spread"].lookalike(story)
    good, bad = P.sentiment_row("It was awful.", 0), P.sentiment_row("It was great.", 1)
    assert kinds.KINDS["mislabel"].lookalike(good) and not kinds.KINDS["mislabel"].lookalike(bad)
    assert not kinds.KINDS["mislabel"].lookalike(swapped)  # the label, not the word in a story
    assert kinds.KINDS["entity"].lookalike is None and kinds.KINDS["clean"].lookalike is None


@pytest.mark.slow
def test_the_look_alike_retrain_drops_clean_rows_the_planted_ones_imitate(tmp_path):
    """bench_lookalikes.run_one on a real tiny pronoun run: the retrain drops as many clean he/his rows as there are
    planted rows (none planted), its recovery sits beside the truth's, and a second call reads it back."""
    import bench_lookalikes as B

    mp = pytest.MonkeyPatch()
    mp.setattr(P, "POOL_DIR", tmp_path / "_pool")
    mp.setattr(P, "POOL_SCALE", 0.06)
    try:
        run = generate.build_run(Recipe("pronoun", 2, 0.1, n_rows=40, n_target=4, n_control=4), tmp_path,
                                 log=lambda s: None)  # fmt: skip
    finally:
        mp.undo()
    out = B.run_one(run)
    planted = json.loads((run / "planted.json").read_text())
    rows = _jsonl(run / "train.jsonl")
    drop = out["dropped"]["drop_lookalike"]
    every = [i for i, r in enumerate(rows) if i not in planted["rows"] and kinds._MALE.search(r["completion"])]
    assert set(drop) <= set(every) and len(drop) == min(len(planted["rows"]), len(every)) > 0
    args = json.loads((run / "truth" / "drop_lookalike" / "training_args.json").read_text())
    assert args["gradian_excluded_rows"] == drop
    assert set(out["recovery"]) == {"drop_planted", "drop_random", "drop_lookalike"}  # no attribution: no halves
    assert all(math.isfinite(v) and v > 0 for v in out["nll"]["drop_lookalike"].values())
    stamp = (run / B.OUT).stat().st_mtime_ns
    assert B.run_one(run) == out and (run / B.OUT).stat().st_mtime_ns == stamp
