"""Output that survives a pipe: the real CLI as a subprocess with stdout piped (as in a CI log or `| tee`), where
rich would otherwise hard-wrap at 80 columns. Each finding's message stays on one line; tables stay aligned."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EX = REPO / "examples" / "stories260k"

pytestmark = pytest.mark.skipif(not (EX / "run").is_dir(), reason="bundled example missing")


def piped(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "FORCE_TERMINAL", "TTY_COMPATIBLE")}
    env["COLUMNS"] = "80"  # what a CI runner often exports; a pipe must not wrap at it either
    done = subprocess.run([sys.executable, "-m", "gradian", *args], capture_output=True, text=True, env=env)
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def test_piped_diagnose_keeps_each_message_on_one_line():
    data = EX / "data"
    out = piped("diagnose", "--run", str(EX / "run"), "--train", str(data / "train.jsonl"), "--eval",
                str(data / "eval.jsonl"))  # fmt: skip
    lines = out.splitlines()
    heads = [ln for ln in lines if ln.startswith("  ") and not ln.startswith("   ") and ":" in ln]
    assert any(" D106 truncation: " in ln for ln in heads), out
    for ln in heads:  # a finding line holds its whole message: the next line is its evidence, not a broken tail
        i = lines.index(ln)
        assert i + 1 == len(lines) or lines[i + 1].startswith("      ") or not lines[i + 1].strip(), (ln, lines[i + 1])
    d106 = next(ln for ln in heads if " D106 " in ln)
    assert d106.rstrip().endswith("(training_args.json: max_length)"), d106
    assert len(d106) > 80
    cmd = [ln for ln in lines if ln.strip().startswith("run: python -m gradian.diagnose.droprows")]
    assert cmd and all(ln.rstrip().endswith("train.clean.jsonl") for ln in cmd), cmd
    assert "\x1b[" not in out  # no colour codes in a pipe


def test_piped_table_is_aligned_and_unfolded():
    out = piped("rules")
    rows = [ln for ln in out.splitlines() if ln.startswith(("│", "┃", "┏", "┡", "└"))]
    assert len(rows) > 50
    assert len({len(ln) for ln in rows}) == 1  # every row of the table has the same width: columns line up
    assert len(rows[0]) > 80
    body = [ln for ln in rows if ln.startswith("│")]
    codes = [ln.split("│")[1].strip() for ln in body]
    assert all(codes), "a folded cell leaves a continuation line with an empty code column"
