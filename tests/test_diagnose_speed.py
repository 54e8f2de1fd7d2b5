"""The shortcuts that make `gradian diagnose` fast give the same answers as the plain computations they replace."""

from __future__ import annotations

import gc
import json
import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gradian.diagnose.minhash import _WORD, _words, near_duplicate_pairs, normalize
from gradian.diagnose.rules.dataset import _MARKER_PARTS, FAMILY_MARKERS, _family_of, _has_mojibake
from gradian.diagnose.textstats import loop_measures, loop_run, paragraph_copies
from gradian.gcpause import gc_paused

PIECES = ["cat", "Sat", "the", "on", "mat.", "x_y", "3.14", "don't", "Über", "é", "ß", "日本語", "İstanbul", "ﬁne",
          "(a)", "a-b", "\t", "\n", "!", "?", "。", "#", "K", "\x00", "\x7f", "Ã©", "â€™", "\ufffd"]  # fmt: skip


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40))) for _ in range(n)]


def test_word_split_equals_the_regex() -> None:
    for t in _texts(2000) + ["", "   ", "a_b c-d e.f", "UPPER lower"]:
        got = [w.decode() if isinstance(w, bytes) else w for w in _words(t, 256)]
        assert got == _WORD.findall(t.lower())[:256]


def _shingles(text: str, k: int = 5) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())[:256]
    words += [f"\x00pad{i}" for i in range(k - len(words))]
    return {tuple(words[i : i + k]) for i in range(len(words) - k + 1)}


def test_near_duplicates_match_brute_force_jaccard() -> None:
    rng = random.Random(1)
    vocab = [f"w{i}" for i in range(400)]
    base = [" ".join(rng.choice(vocab) for _ in range(rng.randint(20, 60))) for _ in range(150)]
    texts = list(base)
    for t in base[:60]:  # near copies: one word changed at the end, or a copy with other case and spacing
        ws = t.split()
        texts.append(" ".join(ws[:-1] + ["zz"]) if rng.random() < 0.5 else "  ".join(ws).upper())
    rng.shuffle(texts)
    texts = [normalize(t) for t in texts]
    sh = [_shingles(t) for t in texts]
    truth = {
        (i, j): len(sh[i] & sh[j]) / len(sh[i] | sh[j]) for i in range(len(texts)) for j in range(i + 1, len(texts))
    }
    got = near_duplicate_pairs(texts, threshold=0.9)
    assert got, "the planted near copies must be found"
    for i, j, jac in got:
        assert jac == round(truth[(i, j)], 3) and truth[(i, j)] >= 0.9
    strong = {p for p, jac in truth.items() if jac >= 0.95}
    assert strong <= {(i, j) for i, j, _ in got}  # 8 bands of 4: recall ~1 at Jaccard 0.95


def test_family_screen_keeps_every_marker() -> None:
    for fam, markers in FAMILY_MARKERS.items():
        for m in markers:
            assert any(p in m for p in _MARKER_PARTS), m
            found = _family_of(f"some text {m} more")
            assert found is not None and (found == fam or m in FAMILY_MARKERS[found])
    assert _family_of("no markers: just < and words") is None


def test_mojibake_screen_equals_the_full_pattern() -> None:
    full = re.compile("\ufffd|Ã[\u0080-\u00bf]|â€|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
    for t in _texts(3000, seed=2):
        assert _has_mojibake(t) == bool(full.search(t))


def _loop_measures_plain(text: str) -> tuple[int, float, float]:
    """loop_measures without its shortcuts."""
    words = text.lower().split()
    units = [u.strip().lower() for u in re.split(r"(?<=[.!?。！？])\s+|\n+", text) if u and u.strip()]
    seen = Counter(units)
    copies = max(loop_run(units), paragraph_copies(text)) if len(seen) < len(units) else 1
    dup_sent = sum(len(u) for u in units if seen[u] > 1) / (sum(len(u) for u in units) or 1) if units else 0.0
    grams = [" ".join(words[i : i + 10]) for i in range(len(words) - 9)]
    counts = Counter(grams)
    covered = [False] * len(words)
    for i, g in enumerate(grams):
        if counts[g] > 1:
            covered[i : i + 10] = [True] * 10
    wchars = sum(len(w) for w in words) or 1
    return copies, dup_sent, sum(len(w) for w, c in zip(words, covered, strict=True) if c) / wchars


@pytest.mark.parametrize("seed", [3, 4])
def test_loop_measures_shortcuts_change_nothing(seed: int) -> None:
    rng = random.Random(seed)
    small = ["a", "b", "the", "cat.", "sat!", "\n", "x?", "。", "y", "mat"]
    texts = [" ".join(rng.choice(small) for _ in range(rng.randint(0, 80))) for _ in range(3000)]
    texts += ["The answer is 4. " * k + "Done" for k in range(1, 6)] + _texts(500, seed)
    for t in texts:
        assert loop_measures(t) == pytest.approx(_loop_measures_plain(t)), t


def test_gc_paused_restores_the_collector() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves the outer pause in place
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError
    assert gc.isenabled()


def test_template_markers_in_one_order_whatever_the_hash_seed(tmp_path: Path) -> None:
    """D130's marker list (used in its message) is built from sets: ties must not follow the hash seed."""
    rows = [{"text": f"<|user|>\nTell me story {i}.\n<|assistant|>\nStory {i} is short."} for i in range(30)]
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    messages = set()
    for seed in ("1", "2", "3", "4"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-m", "gradian", "diagnose", "--train", str(f), "--select", "D130",
                              "-f", "json"], env=env, capture_output=True, text=True).stdout  # fmt: skip
        messages.add(json.loads(out)[0]["message"])
    assert len(messages) == 1 and "<|assistant|>, <|user|>" in messages.pop()
