"""Control-set thresholds at a target FPR, TPR intervals, layer rules and early-layer controls."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from app.stats.bootstrap import set_min_interval_groups
from app.stats.probe_layers import (
    LAYER_RULES,
    VALIDATION,
    EarliestBest,
    FixedDepth,
    early_layer_controls,
    parse_layer_rule,
)
from app.stats.probe_thresholds import (
    THRESHOLD_RULES,
    clopper_pearson,
    operating_point,
    parse_threshold_rule,
    threshold_at_fpr,
)


@pytest.mark.parametrize("n", [37, 100, 250])
@pytest.mark.parametrize("fpr", [0.01, 0.05, 0.1, 0.29])
def test_realised_fpr_is_within_one_item_of_the_target(n: int, fpr: float):
    control = np.random.default_rng(n).normal(size=n)
    t = threshold_at_fpr(control, fpr)
    flagged = int((control >= t.value).sum())  # counted directly, not from the result
    assert flagged == t.flagged
    assert abs(flagged - fpr * n) < 1 and flagged <= fpr * n + 1e-9
    assert flagged == math.floor(fpr * n + 1e-9)  # no ties: exactly the allowed count


def test_ties_at_the_cut_stay_unflagged_and_zero_fpr_flags_nothing():
    control = np.array([5.0, 4.0, 4.0, 4.0, 3.0, 2.0, 1.0, 0.0, 0.0, -1.0])
    t = threshold_at_fpr(control, 0.2)  # 2 allowed, but the second place is a 3-way tie
    assert t.flagged == 1 and t.value == 5.0
    nothing = threshold_at_fpr(control, 0.0)
    assert nothing.flagged == 0 and (control < nothing.value).all()
    everything = threshold_at_fpr(control, 0.95)  # 9 allowed: all but the minimum
    assert everything.flagged == 9 and everything.value == 0.0


def test_operating_point_tpr_matches_a_direct_count_with_intervals():
    set_min_interval_groups(1)
    rng = np.random.default_rng(0)
    control = rng.normal(size=200)
    lies = rng.normal(loc=2.0, size=80)
    op = operating_point(control, lies, 0.05, resamples=500, seed=1)
    cut = np.sort(control)[::-1][9]  # the 10th largest: 10 = 0.05 * 200 flagged
    assert op.threshold.value == cut and op.threshold.flagged == 10
    detected = int((lies >= cut).sum())
    assert op.detected == detected and op.tpr.value == pytest.approx(detected / 80)
    low, high = op.tpr.ci
    assert low < op.tpr.value < high and high - low < 0.5
    ref = binomtest(detected, 80).proportion_ci(0.95, method="exact")
    assert op.tpr_exact_ci == pytest.approx((ref.low, ref.high), abs=1e-9)
    assert op.to_dict()["tpr_ci"] == [low, high]


def test_bootstrap_keeps_groups_whole():
    # Lies in 4 groups of 20 identical scores: resampling whole groups gives a wide interval,
    # item-level resampling of the same scores a much narrower one.
    set_min_interval_groups(1)
    control = np.linspace(-3, 3, 100)
    lies = np.repeat([-1.0, 0.5, 2.0, 4.0], 20)
    grouped = operating_point(
        control, lies, 0.1, positive_groups=np.repeat(np.arange(4), 20), resamples=400
    )
    items = operating_point(control, lies, 0.1, resamples=400)
    assert grouped.tpr.value == items.tpr.value
    width = lambda op: op.tpr.ci[1] - op.tpr.ci[0]  # noqa: E731
    assert width(grouped) > 2 * width(items)


def test_clopper_pearson_edges_and_rules():
    assert clopper_pearson(0, 10)[0] == 0.0 and clopper_pearson(10, 10)[1] == 1.0
    with pytest.raises(ValueError):
        clopper_pearson(3, 2)
    assert parse_threshold_rule("fpr:0.01") is THRESHOLD_RULES["fpr:0.01"]
    assert parse_threshold_rule("fpr:0.2").target_fpr == 0.2
    assert parse_threshold_rule("fpr:0.2").name == "fpr:0.2"
    for bad in ("fpr:2", "fpr:x", "youden"):
        with pytest.raises(ValueError):
            parse_threshold_rule(bad)


def test_layer_rules_and_early_controls():
    layers = [0, 2, 4, 8, 15, 24, 29]
    val = np.array([0.71, 0.6, 0.8, 0.93, 0.93, 0.9, 0.85])
    other = np.array([0.5, 0.55, 0.6, 0.7, 0.75, 0.91, 0.8])
    curves = {VALIDATION: val, "repe": other}
    choice = LAYER_RULES["earliest_best"].choose(curves, layers, 30)
    assert (choice.layer_index, choice.layer, choice.source) == (3, 8, VALIDATION)
    # Controls: captured layers <= ceil(0.1 * 30) = 3, i.e. the embeddings and layer 2.
    assert choice.controls == {0: 0.71, 2: 0.6}
    on_other = parse_layer_rule("best_on:repe").choose(curves, layers, 30)
    assert on_other.layer == 24 and on_other.source == "repe" and on_other.rule == "best_on:repe"
    assert EarliestBest(tol=0.02).choose(curves, layers, 30).layer == 8
    assert EarliestBest(tol=0.15).choose(curves, layers, 30).layer == 4
    assert parse_layer_rule("depth:0.5").choose(curves, layers, 30).layer == 15
    assert FixedDepth(0.3).choose({}, layers, 30).curve == ()
    assert early_layer_controls(val, layers, 100) == {0: 0.71, 2: 0.6, 4: 0.8, 8: 0.93}
    with pytest.raises(ValueError, match="curve 'nope'"):
        parse_layer_rule("best_on:nope").choose(curves, layers, 30)
    for bad in ("best_on:", "best_on:validation", "depth:2", "latest"):
        with pytest.raises(ValueError):
            parse_layer_rule(bad)
