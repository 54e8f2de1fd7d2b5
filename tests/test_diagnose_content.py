"""The content rules on real data: silent (no error or warning from any dataset rule) on clean GSM8K, the sentiment
sentences, tinyshakespeare text rows and the base-model stories; and every planted kind of
bench/diagnose_corpus.py (one fault in 15% of a real set's rows, or another share for the kinds with several cases)
caught with row recall >= 0.8 at precision >= 0.5 (the label-noise review list: 0.2)."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import REPO
from gradian.diagnose.api import diagnose_full
from gradian.diagnose.settings import DiagnoseSettings
from test_diagnose_helpers import SHARED

pytestmark = pytest.mark.skipif(not (SHARED / "data").is_dir(), reason="../shared/data absent")


def _corpus_module():
    spec = importlib.util.spec_from_file_location("diagnose_corpus", REPO / "bench" / "diagnose_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    return out, _corpus_module().build(out)


def flagged(path) -> tuple[dict[str, set[int]], list]:
    fs, notes, _ = diagnose_full(train=path, select=["D"], settings=DiagnoseSettings())
    assert not [n for n in notes if "internal error" in n.reason], notes
    rows: dict[str, set[int]] = {}
    for f in fs:
        rows.setdefault(f.code, set()).update(f.evidence.get("rows") or [])
    return rows, fs


@pytest.mark.parametrize("name", ["gsm8k", "sentiment", "shakespeare", "stories", "gsm8k_chat"])
def test_clean_real_sets_have_no_error_or_warning(corpus, name):
    out, man = corpus
    _, fs = flagged(out / man["clean"][name])
    assert [(f.code, f.message) for f in fs if f.severity.value != "info"] == []


def test_planted_corpus_has_30_kinds_on_real_text(corpus):
    _, man = corpus
    assert len(man["kinds"]) >= 30
    assert {m["base"] for m in man["kinds"].values()} >= {"gsm8k", "stories", "gsm8k_chat", "sentiment"}


@pytest.mark.parametrize("kind", list(_corpus_module().EXPECT))
def test_planted_kind_caught(corpus, kind):
    out, man = corpus
    mod = _corpus_module()
    m = man["kinds"][kind]
    _, fs = flagged(out / m["file"])
    planted = set(m["rows"])
    best, got, _ = mod.best_finding(fs, m["expect"], planted)
    tp = len(got & planted)
    floor = mod.MIN_PRECISION.get(kind, 0.5)
    assert tp / len(planted) >= 0.8 and tp / max(1, len(got)) >= floor, (kind, best, tp, len(planted), len(got))


def test_short_answer_learns_the_lengths_of_the_files_rows(tmp_path):
    """D133 on the base-model stories: 10% of them cut after their first sentence (no 8x factor catches a story cut to
    a third of its length) are flagged as low outliers of the file's own log lengths, with few other rows; the uncut
    file's few naturally short stories are a tail, not a group, and stay unflagged (the clean-set test above)."""
    import random
    import re

    import realsets

    rows = [dict(r) for r in realsets.stories()]
    rng = random.Random(0)
    cut = sorted(rng.sample(range(len(rows)), len(rows) // 10))
    for i in cut:
        m = re.search(r"[.!?](?=\s|$)", rows[i]["completion"])
        rows[i]["completion"] = rows[i]["completion"][: m.end()] if m else rows[i]["completion"]
    path = tmp_path / "cut.jsonl"
    realsets.write_jsonl(path, rows)
    got = flagged(path)[0].get("D133", set())
    hit = len(got & set(cut))
    assert hit / len(cut) >= 0.7 and hit / max(1, len(got)) >= 0.8, (hit, len(cut), len(got))
