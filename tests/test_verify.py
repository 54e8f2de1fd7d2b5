"""`gradian verify` end to end on a small planted setup cut from the bundled stories260K example.

80 rows (24 of the planted "Zorblax" rows + 56 clean ones, train.yaml config, 3 epochs) are trained with
`gradian train`, attributed and reported as `gradian attribute` does, then verified: re-training without the top-24
rows by harm must recover more of the regression than re-training without 24 random rows. Three ~30-step trainings on
the 260K model.
"""

from __future__ import annotations

import json
import statistics

import pytest

from conftest import BASE_DIR, REPO

EXAMPLE = REPO / "examples" / "stories260k"
N_HARMFUL, N_CLEAN = 24, 56


@pytest.fixture(scope="module")
def attributed(tmp_path_factory):
    from gradian.pipeline import attribute_and_report
    from gradian.train import read_config_file, train_lora

    tmp = tmp_path_factory.mktemp("verify")
    rows = [json.loads(x) for x in (EXAMPLE / "data" / "train.jsonl").read_text("utf-8").splitlines() if x.strip()]
    harmful = json.loads((EXAMPLE / "data" / "exclude_harmful.json").read_text())[:N_HARMFUL]
    planted = set(json.loads((EXAMPLE / "data" / "planted.json").read_text())["truncated"]["indices"])
    clean = [i for i in range(len(rows)) if i not in set(harmful) and i not in planted][:N_CLEAN]
    keep = sorted(harmful + clean)
    train = tmp / "train.jsonl"
    train.write_text("".join(json.dumps(rows[i]) + "\n" for i in keep), "utf-8")
    new_harmful = sorted(keep.index(i) for i in harmful)

    cfg = read_config_file(EXAMPLE / "train.yaml") | {"epochs": 3, "logging_steps": 100}
    run = tmp / "run"
    train_lora(BASE_DIR, train, run, config=cfg, progress=False, quiet=True)
    out = tmp / "attr"
    attribute_and_report(run, base=str(BASE_DIR), train=train, eval=EXAMPLE / "data" / "eval.jsonl", out=out)
    return out, new_harmful


def test_verify_recovers_more_than_random(attributed):
    from gradian.verify import verify

    out, harmful = attributed
    report = json.loads((out / "report.json").read_text())
    assert report["regressed"], "the planted rows should make eval items regress"

    res = verify(out, k=N_HARMFUL, random_seed=0)
    assert (out / "verify.json").is_file()
    on_disk = json.loads((out / "verify.json").read_text())
    assert on_disk["schema"] == "gradian.verify/1"
    assert on_disk["summary"] == res["summary"]

    flagged, rand = res["runs"]["drop_flagged"], res["runs"]["drop_random"]
    assert flagged["n_removed"] == rand["n_removed"] == N_HARMFUL
    assert not set(flagged["removed"]) & set(rand["removed"])
    assert len(set(flagged["removed"]) & set(harmful)) >= N_HARMFUL // 2  # attribution found the planted rows
    assert res["baseline"] == "original adapter" and "reference" not in res["runs"]  # gradian-trained, same config
    # same epochs, fewer steps: 56 rows -> 7 batches x 3 epochs
    assert flagged["global_step"] == 21 and flagged["n_rows_trained"] == N_HARMFUL + N_CLEAN - N_HARMFUL
    s = res["summary"]
    assert s["recovered_flagged"] > s["recovered_random"]
    assert s["recovered_total_flagged"] > s["recovered_total_random"]
    assert s["recovered_flagged"] > 0.3
    assert s["side_effect"] is False and on_disk["originally_excluded"] == []
    # the items the blamed rows drive: picked from the attribution's per-item harm before re-training, then measured
    d = s["driven"]
    assert d["n_items"] == len(res["items"]) and set(d["items"]) <= {it["index"] for it in res["items"]}
    assert d["significant"] and d["n_driven"] > d["expected_by_chance"] and s["confirmed_on"] == "driven items"
    per = {it["index"]: it["recovered"] for it in flagged["items"]}
    on_driven = [per[i] for i in d["items"] if per[i] is not None]
    assert d["recovered_flagged"] == pytest.approx(statistics.median(on_driven))
    # the judged statistic is the median over items; the mean and the summed ratio are reported beside it
    every = [it["recovered"] for it in flagged["items"] if it["recovered"] is not None]
    assert s["recovered_flagged"] == pytest.approx(statistics.median(every)) == flagged["recovered_median"]
    assert s["recovered_mean_flagged"] == pytest.approx(sum(every) / len(every)) == flagged["recovered_mean"]
    assert d["recovered_flagged"] > d["recovered_random"] and f"single out {d['n_driven']} of" in s["text"]


def test_verify_averages_over_training_seeds(attributed):
    """--seeds 2: the first seed is the one-seed check (CPU training is deterministic given the seed); the second
    re-trains on every row as its own baseline, draws its own random rows, and the summary is the mean of the two."""
    from gradian.verify import verify

    out, _ = attributed
    one = verify(out, k=N_HARMFUL, random_seed=0, write=False)
    two = verify(out, k=N_HARMFUL, random_seed=0, seeds=2, write=False)
    first, second = two["seeds"]
    assert second["seed"] == first["seed"] + 1 and second["random_seed"] == 1
    assert first["baseline"] == "original adapter" and second["baseline"] == "reference re-train (all rows)"
    assert set(second["runs"]) == {"reference", "drop_flagged", "drop_random"}
    assert second["runs"]["reference"]["n_removed"] == 0 and second["runs"]["reference"]["recovered_vs_original"]
    assert "/seed" in second["runs"]["drop_flagged"]["adapter"]
    # the first seed repeats the one-seed check exactly
    assert first["runs"]["drop_flagged"]["items"] == one["runs"]["drop_flagged"]["items"]
    assert first["recovered_flagged"] == one["summary"]["recovered_flagged"]
    # another seed, another fine-tune and another random draw of the same size, none of it blamed
    assert second["runs"]["drop_flagged"]["items"] != first["runs"]["drop_flagged"]["items"]
    r0, r1 = set(first["runs"]["drop_random"]["removed"]), set(second["runs"]["drop_random"]["removed"])
    assert r0 != r1 and len(r1) == N_HARMFUL and not r1 & set(second["runs"]["drop_flagged"]["removed"])
    s = two["summary"]
    assert s["n_seeds"] == 2 and s["recovered_flagged_per_seed"] == [
        first["recovered_flagged"],
        second["recovered_flagged"],
    ]
    assert s["recovered_flagged"] == pytest.approx(sum(s["recovered_flagged_per_seed"]) / 2)
    assert s["recovered_random"] == pytest.approx(sum(s["recovered_random_per_seed"]) / 2)
    assert s["margin"] == pytest.approx(sum(s["margin_per_seed"]) / 2)
    assert "Over 2 training seeds" in s["text"] and s["recovered_flagged"] > s["recovered_random"]
    d = s["driven"]  # one prediction, measured under each seed
    assert d["items"] == one["summary"]["driven"]["items"] and len(d["recovered_flagged_per_seed"]) == 2
    assert d["recovered_flagged"] == pytest.approx(sum(d["recovered_flagged_per_seed"]) / 2)


def test_verdict_names_the_items_verify_will_judge(attributed):
    """A concentrated verdict predicts, in report.json, the regressed items its drop_rows drive: the very items a
    default `gradian verify` (which drops those rows) judges the recovery on. No re-training needed to check it."""
    from gradian.options import VerifyOptions
    from gradian.report.schema import Report
    from gradian.verify import driven_by

    out, harmful = attributed
    data = json.loads((out / "report.json").read_text())
    v = data["verdict"]
    assert v["kind"] == "concentrated" and len(set(v["drop_rows"]) & set(harmful)) >= 0.8 * len(v["drop_rows"])
    said = v["how"]["driven"]
    regressed = [int(r["index"]) for r in data["regressed"]]
    judged = driven_by(out, Report.from_dict(data), v["drop_rows"], regressed, VerifyOptions())
    assert judged is not None and said["items"] == judged.items and said["n_items"] == len(regressed)
    assert said["significant"] and said["n_driven"] > said["expected_by_chance"]
    sentence = next(x for x in v["sentences"] if "regressed items" in x and "drive" in x)
    assert f"drive {said['n_driven']} of the {len(regressed)}" in sentence or "every one" in sentence
    # the report's regressed-items table marks them, with the rows' harm z on every regressed item
    md = (out / "report.md").read_text()
    assert "driven by the verdict's rows" in md and md.count("| yes (z ") == said["n_driven"]
    assert md.count("| no (z ") == len(regressed) - said["n_driven"]
    assert "driven by the verdict&#x27;s rows" in (out / "report.html").read_text()


def test_rows_to_drop_prefers_the_verdict():
    from gradian.verify import rows_to_drop

    examples = [{"index": i, "score": float(10 - i)} for i in range(10)]
    report = {"examples": examples, "verdict": {"kind": "concentrated", "drop_rows": [7, 3]}}
    assert rows_to_drop(report)[0] == [3, 7]
    assert rows_to_drop(report, k=2)[0] == [0, 1]
    assert rows_to_drop({"examples": examples})[0] == [0]  # 5% of 10 rows -> 1
    neg = [{"index": i, "score": -1.0} for i in range(3)]
    assert rows_to_drop({"examples": neg}, k=2)[0] == []


def test_recovery_maths():
    from gradian.verify import recovery

    base = {0: 1.0, 1: 2.0, 2: 3.0}
    ft = {0: 2.0, 1: 2.5, 2: 3.02}  # item 2 barely regressed: a re-training wobble of 0.5 nats is 25x its gap
    re = {0: 1.0, 1: 2.5, 2: 2.52}
    r = recovery([0, 1, 2], base, ft, re, threshold=0.05).to_dict()  # as verify.json holds it
    assert [it["recovered"] for it in r["items"]] == pytest.approx([1.0, 0.0, 25.0])
    assert r["recovered_median"] == pytest.approx(1.0)  # what verify judges by: the blow-up does not carry it
    assert r["recovered_mean"] == pytest.approx(26.0 / 3)
    assert r["recovered_total"] == pytest.approx(1.5 / 1.52)
    assert r["still_regressed"] == 1


def test_a_retrain_is_written_as_verify_json_holds_it():
    """verify.json's runs: the re-train, then its recovery; the reference also its own recovery against the
    original adapter (written even when it is None)."""
    from gradian.verify import RetrainRun, recovery

    rec = recovery([0], {0: 1.0}, {0: 2.0}, {0: 1.5}, threshold=0.05)
    drop = RetrainRun([4, 2], 10, 7, 0.9, 1.0, "a", recovery=rec, other_items_mean_change=0.01)
    assert list(drop.to_dict()) == ["removed", "n_removed", "n_rows_trained", "global_step", "train_loss", "seconds",
                                    "adapter", "recovered_median", "recovered_mean", "recovered_total",
                                    "mean_retrained_nll", "still_regressed", "items",
                                    "other_items_mean_change"]  # fmt: skip
    assert drop.to_dict()["n_removed"] == 2 and drop.to_dict()["items"] == [
        {"index": 0, "retrained_nll": 1.5, "recovered": 0.5}
    ]
    ref = RetrainRun([], 12, 9, 0.8, 1.0, "r", recovery=rec, reference=True)
    assert (
        list(ref.to_dict())[-2:] == ["note", "recovered_vs_original"] and ref.to_dict()["recovered_vs_original"] is None
    )


def test_missing_report_is_one_line(tmp_path):
    from gradian.errors import GradianError
    from gradian.verify import verify

    with pytest.raises(GradianError, match="no report.json"):
        verify(tmp_path)


def test_training_config_of_a_foreign_run(tmp_path):
    """A run not trained by `gradian train`: its HF/TRL keys and adapter_config map onto TrainConfig."""
    from gradian.train import build_config
    from gradian.verify import training_config

    (tmp_path / "adapter_config.json").write_text(
        json.dumps(
            {
                "peft_type": "LORA",
                "r": 16,
                "lora_alpha": 32,
                "lora_dropout": 0.1,
                "target_modules": ["q_proj", "v_proj"],
                "base_model_name_or_path": str(BASE_DIR),
            }
        )
    )
    (tmp_path / "training_args.json").write_text(
        json.dumps(
            {
                "learning_rate": 1e-4,
                "num_train_epochs": 2,
                "per_device_train_batch_size": 4,
                "gradient_accumulation_steps": 2,
                "max_length": 256,
                "seed": 7,
                "lr_scheduler_type": "cosine",
                "max_steps": -1,
                "packing": False,
                "dataset_text_field": "text",
                "completion_only_loss": None,
            }
        )
    )
    cfg, source, gradian_trained = training_config(tmp_path, str(BASE_DIR))
    assert not gradian_trained and "training_args.json" in source
    tc = build_config(cfg)
    assert (tc.lr, tc.epochs, tc.batch_size, tc.grad_accum, tc.max_length, tc.seed) == (1e-4, 2.0, 4, 2, 256, 7)
    assert (tc.r, tc.alpha, tc.dropout, sorted(tc.target_modules)) == (16, 32.0, 0.1, ["q_proj", "v_proj"])
    assert tc.lr_scheduler_type == "cosine" and tc.max_steps == -1
