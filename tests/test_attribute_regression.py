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
    from gradian.report.verdict import make_verdict

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
