"""torchrun: `torchrun --nproc_per_node 2 -m gradian -- attribute ...` on CPUs (gloo) gives the single-process scores.

Both runs use the bundled example through the real CLI with small shards (``GRADIAN_SHARD_ROWS``) so each rank owns
several shards, round robin. Checked: the scores of every row, the ranking, the per-item split and the clustering
embedding equal the single-process run's within floating-point tolerance (the curvature sums are all-reduced in
another order); rank 0 alone writes the report; each rank wrote only its own shards, and a rerun with one process
reuses the two-rank store as it is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO

E = "examples/stories260k"
SHARD_ROWS = 48  # 402 rows -> 9 shards: rank 0 gets 0, 2, 4, 6, 8 and rank 1 gets 1, 3, 5, 7
ARGS = ["attribute", "--run", f"{E}/run", "--base", f"{E}/base", "--train", f"{E}/data/train.jsonl",
        "--eval", f"{E}/data/eval.jsonl", "--no-progress", "--batch-size", "16"]  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env |= {"TOKENIZERS_PARALLELISM": "false", "GRADIAN_SHARD_ROWS": str(SHARD_ROWS), "OMP_NUM_THREADS": "1"}
    return env


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("torchrun is not in the venv (it ships with torch)")
    single = tmp_path_factory.mktemp("single")
    two = tmp_path_factory.mktemp("two")
    _run([sys.executable, "-m", "gradian", *ARGS, "--out", str(single)])
    torchrun = str(Path(sys.executable).parent / "torchrun")
    # `--`: torchrun's own parser would otherwise take --run / --logs as abbreviations of --run-path / --logs-specs
    proc = _run([torchrun, "--standalone", "--nproc_per_node", "2", "-m", "gradian", "--", *ARGS, "--out", str(two)])
    return single, two, proc


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def test_two_gloo_ranks_give_the_single_process_scores(runs):
    single, two, _ = runs
    a, b = _report(single), _report(two)
    assert b["settings"]["world_size"] == 2 and a["settings"]["world_size"] == 1
    sa = {e["index"]: e["score"] for e in a["examples"]}
    sb = {e["index"]: e["score"] for e in b["examples"]}
    assert sa.keys() == sb.keys() and len(sa) > 300
    idx = sorted(sa)
    x, y = np.array([sa[i] for i in idx]), np.array([sb[i] for i in idx])
    np.testing.assert_allclose(y, x, rtol=1e-6, atol=1e-9 * np.abs(x).max())
    # the ranking agrees wherever scores are not tied within that tolerance
    assert [e["index"] for e in a["examples"][:20]] == [e["index"] for e in b["examples"][:20]]
    for ca, cb in zip(a["contributions"], b["contributions"], strict=True):
        assert ca["index"] == cb["index"]
        np.testing.assert_allclose([p["score"] for p in cb["per_item"]], [p["score"] for p in ca["per_item"]],
                                   rtol=1e-6, atol=1e-9 * np.abs(x).max())  # fmt: skip
    assert a["eval"] == b["eval"] and a["regressed"] == b["regressed"]


def test_embedding_and_clusters_match(runs):
    single, two, _ = runs
    ea, eb = np.load(single / "embeddings.npy"), np.load(two / "embeddings.npy")
    assert ea.shape == eb.shape
    # principal components are defined up to sign: compare |cos| column by column, and the distances between rows
    cos = np.abs((ea * eb).sum(0)) / (np.linalg.norm(ea, axis=0) * np.linalg.norm(eb, axis=0))
    assert cos.min() > 0.999, cos
    top = 8  # the leading components (the clustering's signal) match tightly
    np.testing.assert_allclose(np.abs(eb[:, :top]), np.abs(ea[:, :top]), rtol=1e-4, atol=1e-6 * np.abs(ea).max())


def test_rank_zero_writes_one_report_and_ranks_split_the_shards(runs):
    single, two, proc = runs
    for name in ("report.html", "report.md", "report.json"):
        assert (two / name).is_file()
    assert proc.stdout.count("Most harmful training rows") == 1  # rank 1 prints nothing of its own
    (store,) = [p for p in (two / "grads").iterdir() if p.is_dir()]
    records = sorted(store.glob("shard_*.json"))
    assert len(records) == 9
    meta = json.loads((store / "meta.json").read_text())
    assert meta["shard_size"] == SHARD_ROWS and meta["n_examples"] == 402


def test_single_process_reuses_the_two_rank_store(runs, tmp_path):
    single, two, _ = runs
    out = tmp_path / "reuse"
    shutil.copytree(two / "grads", out / "grads")
    _run([sys.executable, "-m", "gradian", *ARGS, "--out", str(out)])
    rep = _report(out)
    assert rep["settings"]["train_rows_computed"] == 0
    assert any(n.startswith("reused stored training gradients") for n in rep["notes"])
    sa = {e["index"]: e["score"] for e in _report(single)["examples"]}
    got = {e["index"]: e["score"] for e in rep["examples"]}
    x = np.array([sa[i] for i in sorted(sa)])
    np.testing.assert_allclose([got[i] for i in sorted(sa)], x, rtol=1e-6, atol=1e-9 * np.abs(x).max())
