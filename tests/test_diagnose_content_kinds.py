"""Near duplicates (D104), label noise (D135), foreign rows in a classification set (D134) and cut text rows (D128)
on real text: each rule catches its fault with the right rows (as the user's editor numbers them) and stays silent
(no error or warning) on the same real set left clean."""

from __future__ import annotations

import importlib.util
import random

import pytest

import realsets
from conftest import REPO
from gradian.diagnose.api import diagnose_full
from gradian.diagnose.lines import describe_rows
from gradian.diagnose.settings import DiagnoseSettings
from test_diagnose_helpers import SHARED

pytestmark = pytest.mark.skipif(not (SHARED / "data").is_dir(), reason="../shared/data absent")


def _corpus():
    spec = importlib.util.spec_from_file_location("diagnose_corpus", REPO / "bench" / "diagnose_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


C = _corpus()


def run(path, code):
    """The findings of one rule on a file."""
    fs, _, _ = diagnose_full(train=path, select=[code], settings=DiagnoseSettings())
    return [f for f in fs if f.code == code]


def loud(fs):
    return [(f.code, f.severity.value, f.message) for f in fs if f.severity.value != "info"]


def flagged(fs) -> set[int]:
    return {r for f in fs for r in f.evidence.get("rows") or []}


def test_cut_text_rows_flagged_against_the_files_own_endings(tmp_path):
    """Speeches of tinyshakespeare as text rows, 12% cut at a random character: the cut rows are flagged (the user's
    editor lines in the output); the uncut file, whose speeches now and then end on an interrupted '--', is not."""
    rows = realsets.shakespeare(500, chars=600)
    rng = random.Random(4)
    cut = sorted(rng.sample(range(len(rows)), 60))
    planted = C._plant_each(rows, cut, lambda r: {"text": C._cut_text(r["text"], rng)})
    path = realsets.write_jsonl(tmp_path / "cut.jsonl", planted)
    fs = run(path, "D128")
    got = flagged(fs)
    assert len(got & set(cut)) >= 0.9 * len(cut) and len(got - set(cut)) <= 3, (len(got & set(cut)), len(got))
    assert fs[0].severity.value == "error" and "text that looks cut" in fs[0].message
    assert describe_rows(cut[:2], str(path)) == (f"lines in {path}", [str(cut[0] + 1), str(cut[1] + 1)])
    clean = realsets.write_jsonl(tmp_path / "clean.jsonl", rows)
    assert loud(run(clean, "D128")) == []
