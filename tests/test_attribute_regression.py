"""The regression rule: the drift is learned from the items that improved; pure drift is called noise."""

from __future__ import annotations

import numpy as np
import pytest

from gradian.attribute.regression import RegressionRule, call_regressions, regression_summary, regression_words


def test_a_rise_beyond_the_drift_makes_every_risen_item_count():
    base = np.ones(8)
    ft = base + np.array([0.9, 0.06, 0.03, -0.05, -0.04, -0.06, 0.01, np.nan])
    call = call_regressions(base, ft)
    # drift = 1.4826 x median(0.04, 0.05, 0.06) = 0.074; 0.9 > 2 x drift gates the set; the 0.02 floor keeps 0.03
    assert call.drift == pytest.approx(1.4826 * 0.05)
    assert call.regressed.tolist() == [True, True, True, False, False, False, False, False]
    assert not call.within_noise


def test_rises_no_larger_than_the_drift_are_noise():
    base = np.full(6, 2.0)
    ft = base + np.array([0.08, 0.05, -0.07, -0.06, -0.09, 0.03])
    call = call_regressions(base, ft)
    assert not call.regressed.any() and call.within_noise and call.rose == 3
    assert "none by more than the fine-tune's ordinary drift" in regression_summary(call)


def test_many_items_up_within_a_wide_drift_count_as_a_regression():
    """Each rise is within 2 x the drift, but 14 items rose and 2 fell: a shift of the set, not drift (sign test)."""
    base = np.full(16, 2.0)
    ft = base + np.array([0.25, 0.2, 0.2, 0.18, 0.15, 0.15, 0.12, 0.1, 0.1, 0.08, 0.06, 0.05, 0.04, 0.01, -0.1, -0.15])
    call = call_regressions(base, ft)
    assert call.cutoff > 0.25 and call.shift_p < 0.05  # drift 1.4826 x 0.125: no single item clears 2 x drift
    assert call.regressed.tolist() == [True] * 13 + [False] * 3  # the 0.02 floor still applies
    off = call_regressions(base, ft, RegressionRule(shift_alpha=0))
    assert not off.regressed.any() and off.within_noise
    assert off.shift_p is None and "sign test" not in regression_summary(off)  # a test that did not run is not quoted
    words = regression_words({**RegressionRule().to_dict(), **call.to_dict()})
    assert "none rose by more than" in words and "14 items rose and 2 fell" in words and "sign test p = " in words


def test_the_sign_test_is_the_binomial_tail():
    from math import comb

    from gradian.attribute.regression import sign_test

    assert sign_test(14, 2) == pytest.approx(sum(comb(16, k) for k in range(14, 17)) / 2**16)
    assert sign_test(3, 3) > 0.5 and sign_test(0, 0) == 1.0


def test_item_gate_requires_each_item_to_clear_the_drift():
    base = np.ones(6)
    ft = base + np.array([0.9, 0.06, -0.05, -0.04, -0.06, 0.3])
    call = call_regressions(base, ft, RegressionRule(gate="item"))
    assert call.regressed.tolist() == [True, False, False, False, False, True]


def test_without_improved_items_only_the_floor_applies():
    base = np.ones(4)
    call = call_regressions(base, base + np.array([0.01, 0.03, 0.5, 0.2]))
    assert call.drift is None and call.regressed.tolist() == [False, True, True, True]
    assert "drift is unknown" in regression_words({**RegressionRule().to_dict(), **call.to_dict()})


def test_relative_scale_divides_by_the_base_loss():
    base = np.array([0.1, 2.0, 1.0, 1.0])
    ft = base + np.array([0.2, 0.2, -0.05, -0.05])
    call = call_regressions(base, ft, RegressionRule(scale="relative", gate="item"))
    assert call.regressed.tolist() == [True, False, False, False]  # +200% vs +10% with a 7% drift


BAD_RULES = [{"noise_multiple": -1}, {"shift_alpha": -1}, {"gate": "x"}, {"scale": "log"}, {"min_delta": float("nan")}]


@pytest.mark.parametrize("bad", BAD_RULES)
def test_rule_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        RegressionRule(**bad)


def test_noise_multiple_zero_counts_every_rise_when_the_improvements_are_the_purpose():
    """A task fine-tune: one class improves a lot (the drift), the other class rises a little. At the default gate that
    reads as noise, and the verdict names --noise-multiple 0; with it every rise past --threshold is regressed, and
    report.json records the gate it ran with (as `gradian attribute` writes it)."""
    from gradian.attribute.stages import select_queries
    from gradian.options import AttributeOptions
    from gradian.options.base import OptionError
    from gradian.verdict.make import make_verdict

    rise = np.array([0.075, 0.086, 0.096, 0.134, 0.154, 0.168, 0.236, 0.322, 0.381, 0.398, -0.26, -0.185])
    fall = -np.array([0.61, 0.48, 0.38, 0.32, 0.31, 0.30, 0.30, 0.28, 0.27, 0.26, 0.26, 0.24, 0.22, 0.20, 0.19, 0.18])
    base = np.full(len(rise) + len(fall), 1.0)
    ft = base + np.concatenate([rise, fall])
    q, call = select_queries(base, ft, 0.02, "regressed", AttributeOptions().noise_multiple)
    assert q == [] and call.within_noise and call.drift > 0.3
    v = make_verdict([], [], [], [], n_rows=10, regression=call.to_dict())
    assert v.kind == "no_regression" and "--noise-multiple 0" in " ".join(v.sentences)
    q0, call0 = select_queries(base, ft, 0.02, "regressed", 0.0)
    assert q0 == list(range(10)) and not call0.within_noise
    assert RegressionRule(min_delta=0.02, noise_multiple=0.0).to_dict()["noise_multiple"] == 0.0
    words = regression_words({**RegressionRule(min_delta=0.02, noise_multiple=0.0).to_dict(), **call0.to_dict()})
    assert words == "completion NLL up by more than 0.02 nats/token (--noise-multiple 0: no drift gate)"
    with pytest.raises(OptionError, match="--noise-multiple -1.0 is below 0"):
        AttributeOptions(noise_multiple=-1.0)


def _drift(n: int, sigma: float = 0.05) -> np.ndarray:
    """``n`` (even) changes of a symmetric drift: the half-normal quantiles of ``sigma`` (so the rule's drift reads
    ``sigma``), under 1.5 sigma, each once up and once down, in a shuffled order."""
    from statistics import NormalDist

    m = n // 2
    size = np.array([sigma * NormalDist().inv_cdf(0.5 + 0.5 * (k + 0.5) / m) for k in range(m)])
    return np.random.default_rng(0).permutation(np.concatenate([size, -size]).clip(-1.5 * sigma, 1.5 * sigma))


@pytest.mark.parametrize("sigma", [0.02, 0.05, 0.2])
def test_one_item_past_the_drift_on_a_large_eval_set_is_what_drift_gives(sigma):
    """60 items drift both ways by the same sizes, and one more rose by 2.4 x the drift. At 2 x, drift puts 2.3% of
    the items past the cut-off: more than one of 61 by chance, and the set does not lean up. So the set is within
    noise, and the summary and the verdict say why; without the count of items (family_alpha 0) that one item gates
    the set, as before. One item far past (6 x the drift) still counts alone, and so do seven items just past 2 x
    (binomial)."""
    change = _drift(60, sigma)
    drift = call_regressions(np.full(60, 1.5), np.full(60, 1.5) + change).drift

    def call_with(*rises: float, rule: RegressionRule | None = None):
        changes = np.concatenate([change, np.array(rises) * drift])
        return call_regressions(np.full(len(changes), 1.5), 1.5 + changes, rule)

    call = call_with(2.4)
    assert call.drift == drift and call.beyond == 1 and not call.regressed.any() and call.within_noise
    assert call.top_cutoff > 3 * call.drift and call.count_p > 0.05 and call.rank_p > 0.05
    assert "as 1 of 61 drifting items can by chance" in regression_summary(call)
    from gradian.verdict.make import make_verdict

    said = " ".join(make_verdict([], [], [], [], regression={**RegressionRule().to_dict(), **call.to_dict()}).sentences)
    assert "1 rose past 2 x that drift" in said and "as 1 of 61 drifting items can by chance" in said
    assert "the set does not lean up (signed-rank p = " in said and "within noise" in said
    assert call_with(2.4, rule=RegressionRule(family_alpha=0)).regressed[-1]
    assert call_with(6.0).regressed[-1]
    many = call_with(*[2.2] * 7)
    assert many.beyond == 7 and many.count_p < 0.05 and many.regressed[-7:].all()
    words = regression_words({**RegressionRule().to_dict(), **many.to_dict()})
    assert "beyond what 67 drifting items give (one item past " in words and "signed-rank p < 0.05" in words


def test_a_set_that_leans_up_backs_an_item_past_the_drift():
    """A small eval set whose drift is wide (read from the few items that improved a lot): 6 of 7 target items rose by
    0.44-0.93 nats/token against a drift of 0.34, one past 2 x it. No item passes the largest rise 20 drifting items
    reach, and one past 2 x is no more than chance, but rises outweigh falls by rank and size (signed-rank), so the
    set regressed: the truncated run of tests/test_end_to_end.py, its 20 changes as measured."""
    change = np.array([0.511, 0.649, 0.929, 0.052, 0.450, 0.487, 0.443, 0.104, 0.203, 0.284, -0.230, 0.240, 0.216,
                       -0.276, -0.229, 0.044, -0.081, 0.134, -0.344, -0.147])  # fmt: skip
    call = call_regressions(np.ones(20), 1 + change)
    assert call.beyond == 1 and change.max() < call.top_cutoff and call.count_p > 0.05 and call.shift_p > 0.05
    assert call.rank_p < 0.05 and call.regressed.sum() == 14
    from gradian.attribute.regression import signed_rank_test

    assert signed_rank_test(np.array([0.3, -0.3, 0.1, -0.1])) == pytest.approx(0.5)
    assert signed_rank_test(np.array([0.0, 0.0])) == 1.0


def test_a_small_eval_set_needs_less_than_a_large_one_for_one_item():
    """The largest rise drifting items reach grows with their number: the one-item cut-off is 2.58 x the drift on 10
    items and 3.05 x on 44 (normal quantile 1 - 0.05 / n), never under noise_multiple x the drift (2 items)."""
    for n, z in ((10, 2.576), (44, 3.054)):
        base = np.full(n, 1.0)
        change = np.tile([0.04, -0.04], n // 2)
        change[0] = 0.3
        call = call_regressions(base, base + change)
        assert call.top_cutoff == pytest.approx(z * call.drift, rel=1e-3)
    base = np.full(2, 1.0)
    call = call_regressions(base, base + np.array([0.3, -0.04]))
    assert call.top_cutoff == pytest.approx(call.cutoff)  # 1.96 x on 2 items: the 2 x cut-off holds


def test_the_tests_hold_on_an_eval_set_of_thousands_of_items():
    """The sign and binomial tails are summed in log space: an eval set of 5,000 items (2**5000 overflows a float)."""
    from gradian.attribute.regression import sign_test
    from gradian.tails import binomial_tail

    assert sign_test(2500, 2500) == pytest.approx(0.5, abs=0.01) and sign_test(2700, 2300) < 1e-6
    assert binomial_tail(1, 44, 0.02275) == pytest.approx(1 - (1 - 0.02275) ** 44)
    base = np.full(5000, 1.0)
    change = _drift(5000)
    change[0] = 2.5 * call_regressions(base, base + change).drift
    call = call_regressions(base, base + change)
    assert call.shift_p > 0.05 and call.beyond == 1 and call.count_p > 0.99 and call.within_noise
    assert call.top_cutoff == pytest.approx(4.265 * call.drift, rel=1e-3)  # 1 - 0.05 / 5000
