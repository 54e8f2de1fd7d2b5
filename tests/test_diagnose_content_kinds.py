"""Near duplicates (D104), label noise (D135), foreign rows in a classification set (D134) and cut text rows (D128)
on real text: each rule catches its fault with the right rows (as the user's editor numbers them) and stays silent
(no error or warning) on the same real set left clean."""

from __future__ import annotations

import random

import pytest

import realsets
from conftest import REPO
from gradian.diagnose.api import diagnose_full
from gradian.diagnose.lines import describe_rows
from gradian.diagnose.settings import DiagnoseSettings
from test_diagnose_content import _corpus_module
from test_diagnose_helpers import SHARED

pytestmark = pytest.mark.skipif(not (SHARED / "data").is_dir(), reason="../shared/data absent")
C = _corpus_module()


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
    editor lines in the output); the uncut file, whose speeches now and then end on an interrupted '--', is not, nor
    is one of shorter rows, some of which end on the title line of a play."""
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
    short = realsets.write_jsonl(tmp_path / "short.jsonl", realsets.shakespeare(1500, chars=300))
    assert loud(run(short, "D128")) == []  # 16 rows close on a title line ('3 KING HENRY VI'), as lines inside do


def test_near_duplicates_with_a_few_words_edited_warn(tmp_path):
    """GSM8K questions, 30 of 600 repeated later with a word or number changed, dropped, added or misspelt: the
    later copies are near duplicates (a warning at 5% of the rows); the real set alone has none, and the bundled
    example's template stories, which recombine the same sentences in other orders, are not copies."""
    rows = realsets.gsm8k(600, start=3000)
    planted, idx = C._near_dups(rows, random.Random(2), 30, 20)
    fs = run(realsets.write_jsonl(tmp_path / "near.jsonl", planted), "D104")
    got = flagged(fs)
    assert len(got & set(idx)) >= 0.9 * len(idx) and len(got - set(idx)) <= 2, (len(got & set(idx)), len(got))
    assert [f.severity.value for f in fs] == ["warning"] and "near duplicates" in fs[0].message
    assert run(realsets.write_jsonl(tmp_path / "clean.jsonl", rows), "D104") == []
    assert loud(run(REPO / "examples" / "stories260k" / "data" / "train.jsonl", "D104")) == []


def _sentiment_with(rows, idx, fn):
    return [fn(r) if k in set(idx) else r for k, r in enumerate(rows)]


def test_foreign_reviews_in_an_english_sentiment_file(tmp_path):
    """Hand-written French, Spanish, German, Portuguese, Italian and Dutch reviews in 40 of 800 English review rows
    (the labels stay English words): the inputs are judged, not the labels, and the short ones by a character model
    of the file's own reviews; the English file alone stays silent."""
    rows = realsets.sentiment(seed=11)[:800]
    idx = sorted(random.Random(3).sample(range(len(rows)), 40))
    pool = iter(random.Random(3).sample(C.REVIEWS, 40))

    def foreign(r):
        s, lab = next(pool)
        return {"prompt": f"Review: {s}\nSentiment:", "completion": " positive" if lab else " negative"}

    fs = run(realsets.write_jsonl(tmp_path / "mixed.jsonl", _sentiment_with(rows, idx, foreign)), "D134")
    got = flagged(fs)
    assert len(got & set(idx)) >= 0.9 * len(idx) and got <= set(idx), (len(got & set(idx)), len(got))
    assert [f.severity.value for f in fs] == ["warning"]
    assert run(realsets.write_jsonl(tmp_path / "clean.jsonl", rows), "D134") == []


def test_flipped_sentiment_labels_listed_for_review(tmp_path):
    """10% of 1,000 real reviews with the other label: a leave-one-out naive Bayes model of the file lists most of
    them (0.72 in this draw; 0.79 to 0.85 in four others and on the corpus: a bag-of-words model misreads about one
    short review in five, flipped or not), the most confident first (half of the first 20 are flipped), as a note;
    the real file alone gets no warning (its own list is a note: the model disagrees with hard, correct reviews), and
    GSM8K questions labelled by their answer's parity, which their words do not predict, get no list at all."""
    rows = realsets.sentiment(seed=12)[:1000]
    idx = sorted(random.Random(5).sample(range(len(rows)), 100))
    fs = run(realsets.write_jsonl(tmp_path / "noisy.jsonl", _sentiment_with(rows, idx, C._flip)), "D135")
    model = [f for f in fs if f.evidence.get("kind") == "model"]
    assert [f.severity.value for f in model] == ["info"]
    got = flagged(model)
    assert len(got & set(idx)) >= 0.7 * len(idx) and len(got) <= 0.35 * len(rows), (len(got & set(idx)), len(got))
    assert len(set(model[0].evidence["most_confident"]) & set(idx)) >= 10  # the list holds 1 in 4
    assert loud(run(realsets.write_jsonl(tmp_path / "clean.jsonl", rows), "D135")) == []
    answers = [(r["prompt"], int(r["completion"].split("####")[-1].replace(",", ""))) for r in realsets.gsm8k(600)]
    parity = [{"prompt": p, "completion": " odd" if a % 2 else " even"} for p, a in answers]
    assert run(realsets.write_jsonl(tmp_path / "parity.jsonl", parity), "D135") == []  # words do not predict it
