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
    """10% of 1,000 real reviews with the other label: a leave-one-out naive Bayes model of the file disagrees with
    far more labels among the rows it reads most clearly than a clean file shows there, so the file gets a warning
    naming those rows (45% of them flipped here); the other rows that read like the other label are a note; together
    they hold most flipped rows (0.72 here). The real file alone gets no warning (its own list is a note: the model
    disagrees with hard, correct reviews), and GSM8K questions labelled by their answer's parity, which their words do
    not predict, get no list at all."""
    rows = realsets.sentiment(seed=12)[:1000]
    idx = sorted(random.Random(5).sample(range(len(rows)), 100))
    fs = run(realsets.write_jsonl(tmp_path / "noisy.jsonl", _sentiment_with(rows, idx, C._flip)), "D135")
    model = [f for f in fs if f.evidence.get("kind") in ("noisy_file", "model")]
    assert [(f.severity.value, f.evidence["kind"]) for f in model] == [("warning", "noisy_file"), ("info", "model")]
    assert "Labels look flipped" in model[0].message
    named, got = flagged(model[:1]), flagged(model)
    assert len(named & set(idx)) >= 0.35 * len(named), (len(named & set(idx)), len(named))
    assert len(got & set(idx)) >= 0.7 * len(idx) and len(got) <= 0.35 * len(rows), (len(got & set(idx)), len(got))
    assert len(set(model[0].evidence["most_confident"]) & set(idx)) >= 10
    assert loud(run(realsets.write_jsonl(tmp_path / "clean.jsonl", rows), "D135")) == []
    answers = [(r["prompt"], int(r["completion"].split("####")[-1].replace(",", ""))) for r in realsets.gsm8k(600)]
    parity = [{"prompt": p, "completion": " odd" if a % 2 else " even"} for p, a in answers]
    assert run(realsets.write_jsonl(tmp_path / "parity.jsonl", parity), "D135") == []  # words do not predict it


@pytest.mark.parametrize(("seed", "sources", "n", "share"), [
    (31, ("amazon", "imdb", "yelp"), 1500, 0.10), (32, ("yelp",), 1000, 0.15), (33, ("amazon", "imdb"), 800, 0.08),
])  # fmt: skip
def test_randomly_flipped_labels_warn_on_fresh_draws(tmp_path, seed, sources, n, share):
    """Fresh draws of the corpus' three label-noise shapes (8% to 15% of unique reviews flipped): the file gets the
    noisy-labels warning, 30% or more of the rows it names are flipped (a third to two thirds measured), and with the
    review note it holds 80% of the flipped rows."""
    rows = realsets.sentiment(seed=seed, sources=sources)[:n]
    idx = sorted(random.Random(seed).sample(range(len(rows)), int(share * len(rows))))
    fs = run(realsets.write_jsonl(tmp_path / "noisy.jsonl", _sentiment_with(rows, idx, C._flip)), "D135")
    warn = [f for f in fs if f.evidence.get("kind") == "noisy_file"]
    assert [f.severity.value for f in warn] == ["warning"]
    named, got = flagged(warn), flagged(f for f in fs if f.evidence.get("kind") in ("noisy_file", "model"))
    assert len(named & set(idx)) >= 0.3 * len(named) and len(named & set(idx)) >= 0.25 * len(idx), len(named)
    assert len(got & set(idx)) >= 0.8 * len(idx), (len(got & set(idx)), len(idx))


@pytest.mark.parametrize("sources", [("amazon",), ("imdb",), ("yelp",), ("amazon", "imdb", "yelp")])
def test_clean_real_label_files_get_no_label_noise_warning(tmp_path, sources):
    """The real sentiment files, whole (1,000 reviews each, and the 3,000 together): no D135 warning. A bag-of-words
    model misreads about a fifth of their reviews, but few of those it reads most clearly."""
    rows = realsets.sentiment(seed=0, sources=sources)
    assert loud(run(realsets.write_jsonl(tmp_path / "clean.jsonl", rows), "D135")) == []


def test_clean_labels_of_another_task_are_not_called_noisy(tmp_path):
    """The same reviews labelled by their source site (amazon, imdb, yelp): an exact label of another difficulty. A
    few identical short reviews on two sites are conflicting copies; the labels are not called noisy."""
    rows = [{"prompt": r["prompt"], "completion": f" {s}"} for s in ("amazon", "imdb", "yelp")
            for r in realsets.sentiment(seed=1, sources=(s,))]  # fmt: skip
    random.Random(0).shuffle(rows)
    fs = run(realsets.write_jsonl(tmp_path / "sources.jsonl", rows), "D135")
    assert [f for f in fs if f.evidence.get("kind") == "noisy_file"] == []


def test_math_working_cut_short_is_not_another_language(tmp_path):
    """GSM8K answers cut within their working leave rows of formulas and a few letters ('D1 = <<322=322>>322 D3 =
    2 * 322 ='): too few words to tell a language by, so D134 does not judge them (D128 calls them cut)."""
    rows = realsets.gsm8k(400)
    for k in range(7, 400, 40):  # each cut after its first lines of working
        lines = rows[k]["completion"].split("\n")
        rows[k]["completion"] = "\n".join(lines[:2])[:40]
    rows[3]["completion"] = " D1 = <<322=322>>322\nD3 = 2 * 322 = <<2*322=644>>644\nD2 = 644 - 19 ="
    assert loud(run(realsets.write_jsonl(tmp_path / "cut.jsonl", rows), "D134")) == []
