"""Forgetting and the expected recovery, on real texts: GSM8K rows as the training data, and as regressed items
either held-out GSM8K problems (near the data) or the bundled base model's stories (far from it)."""

from __future__ import annotations

import random

import pytest

from gradian.diagnose.minhash import set_jaccard
from gradian.verdict.forgetting import SAMPLE_ROWS, far_cut, forgetting, nearest, words
from gradian.verdict.recovery import expected_recovery, harm_share
from realsets import gsm8k, stories


@pytest.fixture(scope="module")
def texts(shared_dir):
    train = {i: r["prompt"] + r["completion"] for i, r in enumerate(gsm8k(300))}
    near = [r["prompt"] + r["completion"] for r in gsm8k(20, start=2000)]
    far = [r["prompt"] + r["completion"] for r in stories()[:20]]
    return train, near, far


def test_the_word_index_gives_each_pair_its_jaccard_similarity(texts):
    """The similarities are read from a word index; on real rows (GSM8K, stories, an empty text, a duplicate) each one
    is the pair's Jaccard similarity, and the far cut the quantile of each sampled row's nearest other row."""
    train, near, far = texts
    sets = [words(t) for t in list(train.values())[: SAMPLE_ROWS + 50]] + [frozenset(), words(near[0])]
    for item in [words(t) for t in near[:5] + far[:5]] + [frozenset(), sets[3]]:
        assert nearest(item, sets) == max(set_jaccard(item, b) for b in sets)
    rng = random.Random(0)  # far_cut's own sampling, written out pair by pair
    idx = list(range(len(sets)))
    probe = rng.sample(idx, SAMPLE_ROWS) if len(idx) > SAMPLE_ROWS else idx
    sims = sorted(max((set_jaccard(sets[i], sets[j]) for j in idx if j != i), default=0.0) for i in probe)
    assert far_cut(sets, 0.1) == sims[int(0.1 * len(sims))] and 0 < sims[int(0.1 * len(sims))] < 1


def _bulk_pushes(n: int, seed: int = 0) -> dict[int, float]:
    """Every row a little harm, most of it positive: what a narrow data set does to unrelated items."""
    rng = random.Random(seed)
    return {i: rng.gauss(1.0, 1.0) for i in range(n)}


def _few_rows(n: int, head: int, seed: int = 0) -> dict[int, float]:
    """A few rows carry the harm; the others scatter around zero."""
    rng = random.Random(seed)
    return {i: (50.0 + rng.random() if i < head else rng.gauss(0.0, 1.0)) for i in range(n)}


def test_items_unlike_the_training_rows_are_far_and_held_out_rows_are_not(texts):
    train, near, far = texts
    cut = far_cut([words(t) for t in train.values()], 0.05)
    pool = [words(t) for t in train.values()]
    assert sum(nearest(words(t), pool) < cut for t in far) >= 0.9 * len(far)
    assert sum(nearest(words(t), pool) < cut for t in near) <= 0.2 * len(near)


def test_harm_the_bulk_carries_on_far_items_is_forgetting(texts):
    train, near, far = texts
    f = forgetting(_bulk_pushes(len(train)), [], far, train)
    assert f is not None and f.found and f.bulk_share == 1.0 and f.positive_share > 0.6
    on_near = forgetting(_bulk_pushes(len(train)), [], near, train)
    assert on_near is not None and not on_near.found  # the same harm on the data's own kind of item: not forgetting


def test_harm_a_few_rows_carry_is_not_forgetting(texts):
    train, _, far = texts
    scores = _few_rows(len(train), 15)
    f = forgetting(scores, list(range(15)), far, train)
    assert f is not None and not f.found and f.bulk_share < 0.5
    assert forgetting({i: -1.0 for i in train}, [], far, train) is None  # no net harm: nothing to say


def test_expected_recovery_is_the_rows_share_of_the_positive_harm():
    scores = {0: 6.0, 1: 2.0, 2: 2.0, 3: -5.0}
    assert harm_share(scores, [0]) == pytest.approx(0.6)
    assert harm_share(scores, [0, 3]) == pytest.approx(0.6)  # a helpful row adds no harm
    assert expected_recovery(scores, [0, 1, 2], per_share=1.5) == 1.0  # capped
    assert expected_recovery({0: -1.0}, [0]) == 0.0


def test_the_recovery_factor_is_the_fitted_one():
    """VerdictOptions.recovery_per_harm_share is the slope bench/expected_recovery_fit.py wrote."""
    from conftest import REPO
    from gradian.options import VerdictOptions

    RECOVERY_PER_HARM_SHARE = VerdictOptions().recovery_per_harm_share  # noqa: N806

    text = (REPO / "bench" / "results" / "expected_recovery.md").read_text()
    slope = next(line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("slope: "))
    assert f"{RECOVERY_PER_HARM_SHARE:.2f}" == slope
