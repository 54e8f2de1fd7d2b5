"""The items a row set drives (gradian.verdict.driven): the null of random rows checked by exact enumeration and by
sampling, the count test against an exact binomial, and a planted set found on exactly the items it harms."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction
from statistics import NormalDist

import numpy as np
import pytest

from gradian.attribute.regression import sign_test
from gradian.tails import binomial_tail, normal_tail
from gradian.verdict.driven import driven_items


def test_binomial_tail_matches_the_exact_sum():
    for n, p in ((12, 0.3), (25, 0.0228), (7, 0.9)):
        for k in range(n + 2):
            exact = sum(
                Fraction(math.comb(n, j)) * Fraction(p) ** j * (1 - Fraction(p)) ** (n - j) for j in range(k, n + 1)
            )
            assert binomial_tail(k, n, p) == pytest.approx(float(exact), rel=1e-9, abs=1e-300)
    assert binomial_tail(9, 14, 0.5) == pytest.approx(sign_test(9, 5))
    assert 0.0 < binomial_tail(400, 3000, 0.0228) < 1e-100  # large n: no overflow


def test_normal_tail():
    for z in (-1.0, 0.0, 1.645, 2.0, 3.0):
        assert normal_tail(z) == pytest.approx(1.0 - NormalDist().cdf(z), rel=1e-12)


def test_z_is_exact_against_every_subset_of_the_same_size():
    """The null's mean and variance (without replacement) equal those of the sums over all C(n, k) row subsets."""
    rng = np.random.default_rng(0)
    S = rng.standard_t(3, size=(3, 9))
    blamed = [1, 4, 6]
    sums = np.array([S[:, list(c)].sum(axis=1) for c in itertools.combinations(range(9), 3)])
    found = driven_items(S, [10, 11, 12], list(range(9)), blamed, z=2.0, alpha=0.05)
    for i, item in enumerate((10, 11, 12)):
        want = (S[i, blamed].sum() - sums[:, i].mean()) / sums[:, i].std()
        assert found.z_by_item[item] == pytest.approx(want, rel=1e-10)


def test_random_rows_drive_items_at_the_normal_rate():
    """Random row sets single out an item about P(Z > z) of the time, and a significant count about alpha of the
    time or less."""
    rng = np.random.default_rng(1)
    S = rng.normal(size=(40, 300))
    rows = list(range(300))
    hits, significant, draws = 0, 0, 300
    for d in range(draws):
        blamed = random.Random(d).sample(rows, 20)
        found = driven_items(S, list(range(40)), rows, blamed, z=2.0, alpha=0.05)
        hits += len(found.items)
        significant += found.significant
    assert hits / (40 * draws) == pytest.approx(normal_tail(2.0), abs=0.004)
    assert significant / draws <= 0.08


def test_planted_rows_drive_exactly_the_items_they_harm():
    rng = np.random.default_rng(2)
    S = rng.normal(size=(30, 200))
    planted = list(range(0, 200, 10))  # 20 rows
    harmed = list(range(12))  # the first 12 of 30 items
    S[np.ix_(harmed, planted)] += 2.0
    rows = [1000 + j for j in range(200)]  # training rows are looked up by index, not position
    found = driven_items(S, list(range(100, 130)), rows, [rows[j] for j in planted], z=2.0, alpha=0.05)
    assert found.items == [100 + i for i in harmed]
    assert found.significant and found.p < 1e-9 and found.n_rows == 20
    assert found.expected_by_chance == pytest.approx(30 * normal_tail(2.0))
    assert found.to_dict()["n_driven"] == 12


def test_the_verdict_sentence_follows_the_count():
    """Each case of the verdict's sentence, from real driven_items results: some items, every item, the one item, and
    no more than chance (then it sends the user to verify instead of promising a recovery)."""
    from gradian.verdict.driven import driven_sentence

    rng = np.random.default_rng(3)
    S = rng.normal(size=(10, 100))
    blamed = list(range(10))
    S[:6, :10] += 3.0  # the blamed rows harm items 0-5 of 10
    some = driven_items(S, range(10), range(100), blamed, z=2.0, alpha=0.05)
    assert some.items == list(range(6))
    assert driven_sentence(some).startswith("The 10 rows drive 6 of the 10 regressed items (their harm on each is over")
    assert "The other 4 are not theirs" in driven_sentence(some)
    every = driven_items(S[:6], range(6), range(100), blamed, z=2.0, alpha=0.05)
    assert driven_sentence(every).startswith("The 10 rows drive every one of the 6 regressed items (")
    one = driven_items(S[:1], [7], range(100), blamed, z=2.0, alpha=0.05)
    assert one.significant and driven_sentence(one).startswith("The 10 rows drive the one regressed item (")
    none = driven_items(S[6:], range(4), range(100), blamed, z=2.0, alpha=0.05)
    assert not none.significant
    assert driven_sentence(none).startswith(f"The 10 rows drive only {len(none.items)} of the 4 regressed items, no")
    assert "check with gradian verify" in driven_sentence(none)
