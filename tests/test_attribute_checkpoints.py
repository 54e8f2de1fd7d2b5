"""`gradian attribute --checkpoints`: influence combined over a real run's checkpoints with learning-rate weights.

A tiny real fine-tune (`gradian train`, save_steps 4 → checkpoint-4/8/12) is attributed through the CLI with
``--checkpoints all``; then through each checkpoint alone (reusing the same store). The combined score of every row
must equal ``sum_c weight_c x score_c`` with the weights the run's logged learning rates give, each checkpoint's
gradients must really come from that checkpoint's weights (different stores, different scores), and the regression
(the query items) is the one of the adapter as loaded.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import BASE_DIR, REPO
from gradian.run import discover
from gradian.run.checkpoints import select_checkpoints

TRAIN = REPO / "examples" / "stories260k" / "data" / "train.jsonl"
EVAL = REPO / "examples" / "stories260k" / "data" / "eval.jsonl"
CFG = {"max_steps": 12, "save_steps": 4, "batch_size": 4, "logging_steps": 1, "max_length": 64, "cpu_threads": 1,
       "seed": 3, "lr": 3e-3, "lr_scheduler_type": "linear"}  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from gradian.train import train_lora

    tmp = tmp_path_factory.mktemp("ck")
    data = tmp / "train.jsonl"
    data.write_text("\n".join(TRAIN.read_text("utf-8").splitlines()[:40]) + "\n", "utf-8")
    train_lora(BASE_DIR, data, tmp / "run", config=CFG, progress=False, quiet=True)
    return tmp / "run"


def _attribute(run_dir: Path, out: Path, spec: str) -> dict:
    import subprocess

    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    argv = [sys.executable, "-m", "gradian", "attribute", "--run", str(run_dir), "--base", str(BASE_DIR),
            "--train", str(run_dir.parent / "train.jsonl"), "--eval", str(EVAL), "--out", str(out),
            "--query", "all", "--checkpoints", spec, "--no-progress", "--batch-size", "8"]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((out / "report.json").read_text())


def test_combined_score_is_the_weighted_sum_over_checkpoints(run_dir, tmp_path):
    out = tmp_path / "out"
    combined = _attribute(run_dir, out, "all")
    cks = combined["settings"]["checkpoints"]
    assert [Path(c["path"]).name for c in cks] == ["checkpoint-4", "checkpoint-8", "checkpoint-12"]
    choices, _ = select_checkpoints(discover(run_dir), "all")
    assert [c["weight"] for c in cks] == [c.weight for c in choices]
    assert abs(sum(c["weight"] for c in cks) - 1) < 1e-12
    assert cks[0]["weight"] > cks[1]["weight"] > cks[2]["weight"]  # linear decay: early steps moved the most
    assert any(n.startswith("combined over checkpoints (learning-rate weights)") for n in combined["notes"])
    stores = [p for p in (out / "grads").iterdir() if p.is_dir()]
    assert len(stores) == 3  # one store per checkpoint: gradients at that checkpoint's weights

    alone = {}
    for c in cks:
        step = Path(c["path"]).name.split("-")[1]
        rep = _attribute(run_dir, out, step)
        assert rep["settings"]["train_rows_computed"] == 0  # reused from the combined run
        assert rep["eval"] == combined["eval"]  # the queries are the loaded adapter's, whatever the checkpoint
        alone[c["path"]] = {e["index"]: e["score"] for e in rep["examples"]}
    got = {e["index"]: e["score"] for e in combined["examples"]}
    idx = sorted(got)
    want = sum(c["weight"] * np.array([alone[c["path"]][i] for i in idx]) for c in cks)
    np.testing.assert_allclose([got[i] for i in idx], want, rtol=1e-9, atol=1e-12 * np.abs(want).max())
    a, b = (np.array([alone[c["path"]][i] for i in idx]) for c in (cks[0], cks[-1]))
    assert not np.allclose(a, b)  # the checkpoints really differ


def test_bad_checkpoint_spec_is_one_line(run_dir, tmp_path):
    import subprocess

    argv = [sys.executable, "-m", "gradian", "attribute", "--run", str(run_dir), "--base", str(BASE_DIR),
            "--train", str(run_dir.parent / "train.jsonl"), "--eval", str(EVAL), "--out", str(tmp_path),
            "--checkpoints", "7", "--no-progress"]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "checkpoint-7" in lines[0] and "checkpoint-4" in lines[0], proc.stderr
