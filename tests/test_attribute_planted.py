"""End to end on a planted-fault fine-tune of stories260K: 12 rows rename "Lily" to "Zorbax" among 52 clean rows;
the eval items ask for "Lily". Planted rows must rank first (ROC-AUC), projection must keep the ranking, the
gradient store must be reused and resumable, and report.json must follow its schema."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "attribute"))
import helpers  # noqa: E402

from gradian.attribute.api import attribute, run_attribution  # noqa: E402
from gradian.errors import GradianError  # noqa: E402
from gradian.options import AttributeOptions  # noqa: E402

METHODS = ("kfac", "datainf", "exact", "identity", "cosine")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    out = tmp_path_factory.mktemp("planted")
    info = helpers.train_planted(out / "adapter", epochs=2, lr=5e-3)
    info["out"] = out
    return info


@pytest.fixture(scope="module")
def default_run(planted):
    res = attribute(
        base=str(helpers.BASE),
        adapter=planted["adapter"],
        train=helpers.TRAIN,
        eval=helpers.EVAL,
        out=planted["out"] / "report",
        extra_methods=METHODS,
    )
    return res


def test_planted_rows_rank_first(planted, default_run):
    res = default_run
    y = np.array(planted["planted"])
    assert not res.no_regression
    probes = [json.loads(line)["probe"] for line in helpers.EVAL.read_text().splitlines()]
    assert all(probes[r["index"]] == "lily" for r in res.regressed)
    auc = {"ekfac": roc_auc_score(y, res.scores)} | {m: roc_auc_score(y, s) for m, s in res.settings["also"].items()}
    print("\nplanted ROC-AUC per method: " + str({k: round(v, 4) for k, v in auc.items()}))
    assert auc["ekfac"] >= 0.95
    # sign: planted rows pushed toward the regression (positive harm)
    assert res.scores[y].mean() > 0 > res.scores[~y].mean() or res.scores[y].min() > np.median(res.scores[~y])
    assert np.median(res.scores[y]) > 0


def test_report_json_schema(planted, default_run):
    d = json.loads((planted["out"] / "report" / "report.json").read_text())
    assert d["schema"] == "gradian.report/1" and d["method"] == "ekfac"
    assert {"index", "id", "score", "rank"} <= set(d["examples"][0]) and d["examples"][0]["rank"] == 1
    assert len(d["examples"]) == 64 and sorted(e["rank"] for e in d["examples"]) == list(range(1, 65))
    assert {"index", "base_nll", "finetuned_nll"} <= set(d["regressed"][0])
    top = d["contributions"][0]
    assert len(top["per_item"]) == len(d["regressed"])
    assert sum(p["score"] * 1.0 for p in top["per_item"]) == pytest.approx(top["score"], rel=1e-6)
    assert (
        d["settings"]["proj_dim"] == 0 and d["settings"]["format"]["add_eos"] is True and not d["settings"]["eval_eos"]
    )


def _core(planted, store_dir=None, **kw):
    from gradian.attribute.loading import load

    lm = load(str(helpers.BASE), planted["adapter"])
    _, fx = helpers.formatted(helpers.TRAIN)
    _, efx = helpers.formatted(helpers.EVAL, add_eos=False)
    return run_attribution(lm.model, fx, efx, AttributeOptions(**kw), pad_id=0, store_dir=store_dir)


def test_projected_agrees_with_exact(planted, default_run):
    proj = _core(planted, proj_dim=32, batch_size=16)
    rho = spearmanr(proj.scores, default_run.scores).statistic
    y = np.array(planted["planted"])
    print(f"\nprojected (k=32) vs exact Spearman {rho:.4f}; projected AUC {roc_auc_score(y, proj.scores):.4f}")
    assert proj.settings["stored_floats_per_row"] < default_run.settings["stored_floats_per_row"]
    assert rho >= 0.9


def test_store_reused_and_resumed(planted, tmp_path):
    store = tmp_path / "grads"
    first = _core(planted, store_dir=store, shard_rows=16, batch_size=8)
    shards = sorted(Path(first.settings["store"]).glob("shard_*.safetensors"))
    assert len(shards) == 4
    # other eval items: the stored gradients are reused, no training pass
    _, efx = helpers.formatted(helpers.EVAL, add_eos=False)
    again = _core(planted, store_dir=store, shard_rows=16, batch_size=8, query="all")
    assert any("reused" in n for n in again.notes)
    # an interrupted run: the last shard was never recorded; the rerun resumes there and gives the same scores
    shards[-1].with_suffix(".json").unlink()
    shards[-1].unlink()
    resumed = _core(planted, store_dir=store, shard_rows=16, batch_size=8)
    assert any("resumed" in n and "row 48" in n for n in resumed.notes)
    np.testing.assert_allclose(resumed.scores, first.scores, rtol=1e-6)


def test_no_regression_is_said_plainly(planted, tmp_path):
    controls = [line for line in helpers.EVAL.read_text().splitlines() if '"control"' in line]
    ev = tmp_path / "controls.jsonl"
    ev.write_text("\n".join(controls) + "\n")
    from typer.testing import CliRunner

    from gradian.cli import _register, app

    _register()
    args = [
        "attribute",
        "--base",
        str(helpers.BASE),
        "--adapter",
        str(planted["adapter"]),
        "--train",
        str(helpers.TRAIN),
        "--eval",
        str(ev),
        "--out",
        str(tmp_path / "o"),
        "--no-progress",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "No eval item regressed" in r.output
    d = json.loads((tmp_path / "o" / "report.json").read_text()) if (tmp_path / "o" / "report.json").exists() else None
    assert d is None or d["no_regression"]


def test_pickle_adapter_and_dora_refused(planted, tmp_path):
    from gradian.attribute.loading import check_adapter
    from gradian.run import read_adapter_config

    bad = tmp_path / "adapter"
    shutil.copytree(planted["adapter"], bad)
    (bad / "adapter_model.safetensors").rename(bad / "adapter_model.bin")
    with pytest.raises(GradianError, match="never unpickles"):
        check_adapter(bad, read_adapter_config(bad))
    with pytest.raises(GradianError, match="DoRA"):
        check_adapter(planted["adapter"], {"peft_type": "LORA", "use_dora": True})
    assert torch.get_default_dtype() == torch.float32


def test_bf16_store_halves_the_bytes_and_keeps_the_ranking(planted, tmp_path):
    """--store-dtype bf16: gradients stored in half the bytes (factors stay fp64); scores follow the fp32 store's."""
    runs = {}
    for dt in ("fp32", "bf16"):
        res = _core(planted, store_dir=tmp_path / dt, store_dtype=dt, batch_size=16)
        size = sum(f.stat().st_size for f in Path(res.settings["store"]).glob("shard_*.safetensors"))
        runs[dt] = (res, size)
    (r32, s32), (r16, s16) = runs["fp32"], runs["bf16"]
    g_bytes = 4 * r32.settings["stored_floats_per_row"] * r32.settings["n_train"]
    assert s32 - s16 == pytest.approx(g_bytes / 2, rel=0.01)  # the gradients, and only they, halve
    rho = spearmanr(r16.scores, r32.scores).statistic
    assert rho >= 0.99, rho
    y = np.array(planted["planted"])
    assert roc_auc_score(y, r16.scores) >= roc_auc_score(y, r32.scores) - 0.01
