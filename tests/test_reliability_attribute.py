"""Reliability of `gradian attribute` on the bundled real model (stories260K + its LoRA fine-tune), through the CLI.

A 64-row slice of the bundled training data, batch size 4 and 8-row store shards (``GRADIAN_SHARD_ROWS``, a hidden
setting) give 8 shards, so every failure below lands between finished shards:

- SIGKILL during the gradient pass, rerun the same command: it resumes (recomputes only the missing shards) and its
  scores equal an uninterrupted run's, bit for bit.
- A finished shard with flipped bytes and another truncated: both are caught by the sha256 in the shard's record,
  recomputed, never used; the scores equal a clean run's, bit for bit.
- Two runs of one command give bitwise-identical ``examples`` in report.json (CPU).
- A row whose gradient is NaN (a base model whose embedding of one token, used by only that training row, is NaN —
  what an fp16 overflow in a rare token's embedding looks like) is left out by index with a warning; the rest are
  scored and finite.
- An out-of-memory error in the gradient pass (injected with the ``GRADIAN_TEST_FAULTS`` seam: the model's forward
  raises ``torch.OutOfMemoryError`` the first time a batch holding a given row runs) halves the batch size, keeps
  the finished shards and gives the same ranking and scores (to float rounding: the retried rows are computed in
  smaller batches) as a run without the failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import BASE_DIR, REPO

RUN = REPO / "examples" / "stories260k" / "run"
DATA = REPO / "examples" / "stories260k" / "data"
N_ROWS, N_EVAL, BATCH, SHARD = 64, 8, 4, 8
N_SHARDS = N_ROWS // SHARD
ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "NO_COLOR": "1",
    "COLUMNS": "200",
    "TOKENIZERS_PARALLELISM": "false",
    "GRADIAN_SHARD_ROWS": str(SHARD),
}
ENV.pop("GRADIAN_TEST_FAULTS", None)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inputs")
    lines = (DATA / "train.jsonl").read_text().splitlines()[:N_ROWS]
    (d / "train.jsonl").write_text("\n".join(lines) + "\n")
    (d / "eval.jsonl").write_text("\n".join((DATA / "eval.jsonl").read_text().splitlines()[:N_EVAL]) + "\n")
    return d


def command(inputs: Path, out: Path, base: Path = BASE_DIR) -> list[str]:
    return [
        sys.executable, "-m", "gradian", "attribute", "--run", str(RUN), "--base", str(base),
        "--train", str(inputs / "train.jsonl"), "--eval", str(inputs / "eval.jsonl"), "--out", str(out),
        "--batch-size", str(BATCH), "--no-progress", "--top", "3",
    ]  # fmt: skip


def run(cmd: list[str], **env: str) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, env={**ENV, **env}, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "Traceback" not in res.stdout + res.stderr, res.stderr[-3000:]
    return res


def report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def scores(rep: dict) -> list[tuple[int, float, int]]:
    return [(e["index"], e["score"], e["rank"]) for e in rep["examples"]]


def store_dir(out: Path) -> Path:
    (d,) = [p for p in (out / "grads").iterdir() if p.is_dir()]
    return d


def records(out: Path) -> dict[int, dict]:
    """The store's per-shard completion records (``shard_NNNNN.json``): shard -> {sha256, rows, skipped}."""
    return {int(f.stem.split("_")[1]): json.loads(f.read_text()) for f in store_dir(out).glob("shard_*.json")}


@pytest.fixture(scope="module")
def clean(inputs, tmp_path_factory) -> Path:
    """One uninterrupted run: the reference every other test compares with."""
    out = tmp_path_factory.mktemp("clean")
    run(command(inputs, out))
    rep = report(out)
    assert len(rep["examples"]) == N_ROWS and rep["settings"]["train_rows_computed"] == N_ROWS
    assert sorted(records(out)) == list(range(N_SHARDS))
    return out


def test_two_runs_are_bitwise_identical(inputs, clean, tmp_path):
    run(command(inputs, tmp_path / "again"))
    a, b = report(clean), report(tmp_path / "again")
    assert a["examples"] == b["examples"]  # the whole list: index, id, score (exact float), rank, and the rest
    assert a["contributions"] == b["contributions"]


def test_sigkill_during_gradient_pass_then_resume(inputs, clean, tmp_path):
    out = tmp_path / "killed"
    cmd = command(inputs, out)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    try:
        deadline = time.monotonic() + 240
        done: list[int] = []
        while time.monotonic() < deadline and proc.poll() is None:
            done = list((out / "grads").glob("*/shard_*.json")) if (out / "grads").is_dir() else []
            if done:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.005)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (out / "report.json").exists()
    kept = sorted(records(out))
    assert 1 <= len(kept) < N_SHARDS, kept
    res = run(cmd)
    rep = report(out)
    computed = rep["settings"]["train_rows_computed"]
    assert computed == N_ROWS - SHARD * len(kept) < N_ROWS
    resumed = f"resumed stored training gradients at row {SHARD * len(kept)}: {len(kept)} of {N_SHARDS} shards reused"
    assert any(n.startswith(resumed) for n in rep["notes"]), rep["notes"]
    assert "resumed stored training gradients" in res.stdout
    assert scores(rep) == scores(report(clean))


def test_corrupted_and_truncated_shards_are_recomputed(inputs, clean, tmp_path):
    out = tmp_path / "corrupt"
    shutil.copytree(clean / "grads", out / "grads")
    d = store_dir(out)
    flipped, truncated = d / "shard_00002.safetensors", d / "shard_00005.safetensors"
    data = bytearray(flipped.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 16):  # inside the tensor data: the header still parses
        data[i] ^= 0xFF
    flipped.write_bytes(bytes(data))
    with open(truncated, "r+b") as f:
        f.truncate(truncated.stat().st_size // 3)
    run(command(inputs, out))
    rep = report(out)
    assert rep["settings"]["train_rows_computed"] == 2 * SHARD
    assert "gradient store shard 2 not used (checksum mismatch (corrupted or truncated)); recomputed" in rep["notes"]
    assert "gradient store shard 5 not used (checksum mismatch (corrupted or truncated)); recomputed" in rep["notes"]
    assert scores(rep) == scores(report(clean))
    assert records(out) == records(clean)


def _formatted(inputs: Path) -> tuple[list, list]:
    """The training and eval rows as the run formats them."""
    from gradian.attribute.loading import _load_tokenizer
    from gradian.data import format_examples, load_examples
    from gradian.run import discover, format_settings, load_setup

    art = discover(RUN, base=str(BASE_DIR), train=inputs / "train.jsonl", eval=inputs / "eval.jsonl")
    fs = format_settings(load_setup(art))
    tok = _load_tokenizer(art.tokenizer_dir or art.adapter_dir, str(BASE_DIR), False)
    return [format_examples(load_examples(inputs / n), tok, fs) for n in ("train.jsonl", "eval.jsonl")]


def _poisoned_base(inputs: Path, dst: Path) -> tuple[Path, int, int]:
    """A copy of the base whose input embedding of one token is NaN, where that token occurs in exactly one
    formatted training row and in no eval item. The output head is untied (an exact copy of the original embedding)
    so only rows that *contain* the token are affected. Returns (base dir, training row index, token id)."""
    import torch
    from transformers import AutoModelForCausalLM

    train, evals = _formatted(inputs)
    eval_tokens = {t for f in evals for t in f.input_ids}
    rows_of: dict[int, set[int]] = {}
    for f in train:
        for t in set(f.input_ids):
            rows_of.setdefault(t, set()).add(f.index)
    token, rows = next((t, r) for t, r in sorted(rows_of.items()) if len(r) == 1 and t not in eval_tokens)
    model = AutoModelForCausalLM.from_pretrained(str(BASE_DIR))
    emb = model.get_input_embeddings().weight
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(emb.detach().clone())
    with torch.no_grad():
        emb[token] = float("nan")
    model.save_pretrained(str(dst))
    for f in BASE_DIR.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "tok512")):
            shutil.copy(f, dst / f.name)
    return dst, next(iter(rows)), token


def test_row_with_nan_gradient_is_reported_and_left_out(inputs, tmp_path):
    base, row, token = _poisoned_base(inputs, tmp_path / "poisoned")
    out = tmp_path / "nan"
    res = run(command(inputs, out, base=base))
    rep = report(out)
    skipped = rep["settings"]["skipped_rows"]
    assert [s["index"] for s in skipped] == [row], (token, skipped)
    assert skipped[0]["reason"] == "nan gradient"
    assert any(n.startswith("warning: 1 training row(s) with non-finite") and f"row {row}" in n for n in rep["notes"])
    assert f"row {row}" in res.stdout
    indices = [e["index"] for e in rep["examples"]]
    assert row not in indices and len(indices) == N_ROWS - 1
    assert all(isinstance(e["score"], float) for e in rep["examples"])  # finite: report.json forbids NaN
    assert rep["examples"][0]["score"] > 0


def test_oom_halves_the_batch_and_keeps_finished_shards(inputs, clean, tmp_path):
    out = tmp_path / "oom"
    row = 3 * SHARD + 1  # in shard 3: shards 0-2 are finished when it fails
    res = run(command(inputs, out), GRADIAN_TEST_FAULTS=f"oom@{row}")
    rep = report(out)
    assert rep["settings"]["oom_retries"] == 1
    assert rep["settings"]["train_rows_computed"] == N_ROWS  # nothing computed twice into the store
    # a shard's rows run longest first, in batches of about one length; the note names the failed batch's first row
    shard = sorted(range(3 * SHARD, 4 * SHARD), key=lambda i: -len(_formatted(inputs)[0][i].input_ids))
    failed = shard[shard.index(row) // BATCH * BATCH]
    note = f"out of memory at training row {failed} with batch size {BATCH}; retried with batch size {BATCH // 2}"
    assert any(n.startswith(note) for n in rep["notes"]), rep["notes"]
    assert "out of memory" in res.stdout
    got_rec, ref = records(out), records(clean)
    for i in range(3):  # shards finished before the failure are the clean run's, byte for byte
        assert got_rec[i]["sha256"] == ref[i]["sha256"]
    # Shard 3's rows ran in batches of 2, not 4: other padding, so fp32 rounding differs (measured: 2e-5 relative).
    got = {e["index"]: e["score"] for e in rep["examples"]}
    want = {e["index"]: e["score"] for e in report(clean)["examples"]}
    top = max(abs(v) for v in want.values())
    assert got.keys() == want.keys()
    assert max(abs(got[i] - want[i]) for i in want) <= 1e-4 * top
    assert [e["index"] for e in rep["examples"][:3]] == [e["index"] for e in report(clean)["examples"][:3]]
