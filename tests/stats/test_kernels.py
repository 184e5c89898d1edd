"""Weighted kernels equal scikit-learn on the materialised (repeated) sample."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

from app.stats import _kernels

TOL = 1e-12


@st.composite
def weighted_sample(draw: st.DrawFn) -> tuple:
    """Labels, tied scores, integer item weights (zeros included) for a few resamples."""
    n = draw(st.integers(1, 40))
    y = draw(arrays(np.bool_, n))
    values = draw(st.lists(st.floats(0, 1), min_size=1, max_size=5, unique=True))
    p = draw(arrays(np.float64, n, elements=st.sampled_from(values)))
    b = draw(st.integers(1, 4))
    weights = draw(arrays(np.int64, (b, n), elements=st.integers(0, 3)))
    return y, p, weights


def materialise(y: np.ndarray, p: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    index = np.repeat(np.arange(y.size), w)
    return y[index], p[index]


@settings(max_examples=300, deadline=None)
@given(weighted_sample())
def test_weighted_rank_metrics_equal_sklearn_on_repeated_items(data: tuple) -> None:
    y, p, weights = data
    aurocs, precisions = _kernels.weighted_rank_metrics(y, p, weights)
    briers = _kernels.weighted_brier(y, p, weights)
    for b, w in enumerate(weights):
        ys, ps = materialise(y, p, w)
        if ys.any() and not ys.all():
            assert abs(aurocs[b] - roc_auc_score(ys, ps)) <= TOL
        else:
            assert np.isnan(aurocs[b])
        if ys.any():
            assert abs(precisions[b] - average_precision_score(ys, ps)) <= TOL
        else:
            assert np.isnan(precisions[b])
        if ys.size:
            assert abs(briers[b] - brier_score_loss(ys, ps)) <= TOL
        else:
            assert np.isnan(briers[b])


@settings(max_examples=200, deadline=None)
@given(weighted_sample(), st.data())
def test_group_weights_equal_sklearn_on_materialised_group_resample(
    data: tuple, extra: st.DataObject
) -> None:
    """Weights given per group (the bootstrap's form) expand to every item of the group."""
    y, p, _ = data
    n_groups = extra.draw(st.integers(1, max(1, y.size)))
    units = extra.draw(arrays(np.intp, y.size, elements=st.integers(0, n_groups - 1)))
    multiplicities = extra.draw(arrays(np.int32, (3, n_groups), elements=st.integers(0, 3)))
    sums = _kernels.RankPlan(y, p, units, n_groups).evaluate(multiplicities)
    aurocs, precisions = _kernels.auroc_from(sums), _kernels.average_precision_from(sums)
    for b in range(3):
        ys, ps = materialise(y, p, multiplicities[b][units])
        if ys.any() and not ys.all():
            assert abs(aurocs[b] - roc_auc_score(ys, ps)) <= TOL
        else:
            assert np.isnan(aurocs[b])
        if ys.any():
            assert abs(precisions[b] - average_precision_score(ys, ps)) <= TOL


@settings(max_examples=200, deadline=None)
@given(weighted_sample(), st.data())
def test_weighted_choice_matched_equals_brute_force_on_materialised(
    data: tuple, extra: st.DataObject
) -> None:
    y, p, weights = data
    strata = extra.draw(arrays(np.intp, y.size, elements=st.integers(0, 2)))
    values = _kernels.weighted_choice_matched_auroc(y, p, strata, 3, weights)
    for b, w in enumerate(weights):
        index = np.repeat(np.arange(y.size), w)
        ys, ps, cs = y[index], p[index], strata[index]
        positive, negative = ys[:, None], ~ys[None, :]
        same = cs[:, None] == cs[None, :]
        pairs = positive & negative & same
        if not pairs.any():
            assert np.isnan(values[b])
            continue
        wins = (ps[:, None] > ps[None, :]) + 0.5 * (ps[:, None] == ps[None, :])
        assert abs(values[b] - wins[pairs].sum() / pairs.sum()) <= TOL


def test_float_weights_match_sklearn_sample_weight() -> None:
    rng = np.random.default_rng(3)
    y = rng.random(200) < 0.4
    p = rng.choice([0.1, 0.3, 0.3001, 0.7, 0.9], size=200)
    weights = rng.random((5, 200))
    weights[:, :20] = 0.0
    aurocs, precisions = _kernels.weighted_rank_metrics(y, p, weights)
    briers = _kernels.weighted_brier(y, p, weights)
    for b, w in enumerate(weights):
        assert abs(aurocs[b] - roc_auc_score(y, p, sample_weight=w)) <= TOL
        assert abs(precisions[b] - average_precision_score(y, p, sample_weight=w)) <= TOL
        assert abs(briers[b] - brier_score_loss(y, p, sample_weight=w)) <= TOL


def test_zero_weight_at_the_top_of_the_ranking() -> None:
    # The highest-scoring positive has weight 0 and nothing above it has weight: its precision
    # would be 0/0, and it must contribute nothing rather than NaN.
    y = np.array([True, True, False, True, False])
    p = np.array([0.99, 0.6, 0.5, 0.4, 0.2])
    weights = np.array([[0, 1, 1, 2, 1]])
    aurocs, precisions = _kernels.weighted_rank_metrics(y, p, weights)
    ys, ps = materialise(y, p, weights[0])
    assert abs(aurocs[0] - roc_auc_score(ys, ps)) <= TOL
    assert abs(precisions[0] - average_precision_score(ys, ps)) <= TOL


def test_large_integer_weights_switch_to_int64_and_stay_exact() -> None:
    y = np.array([True, False, True, False, True])
    p = np.array([0.9, 0.8, 0.8, 0.1, 0.05])
    weights = np.array([[2**31, 3, 5, 2**30, 7]], dtype=np.int64)
    plan = _kernels.RankPlan(y, p, np.arange(5, dtype=np.intp), 5)
    assert plan._accumulator(weights) is np.int64
    aurocs, precisions = _kernels.weighted_rank_metrics(y, p, weights)
    w = weights[0].astype(np.float64)
    assert abs(aurocs[0] - roc_auc_score(y, p, sample_weight=w)) <= TOL
    assert abs(precisions[0] - average_precision_score(y, p, sample_weight=w)) <= TOL


def test_workspace_reuse_does_not_leak_between_calls() -> None:
    rng = np.random.default_rng(0)
    y = rng.random(300) < 0.3
    p = rng.random(300)
    plan = _kernels.RankPlan(y, p, np.arange(300, dtype=np.intp), 300)
    workspace = _kernels.Workspace()
    big = rng.integers(0, 4, size=(6, 300))
    small = rng.integers(0, 4, size=(2, 300))
    fresh = plan.evaluate(small)
    plan.evaluate(big, workspace=workspace)
    reused = plan.evaluate(small, workspace=workspace)
    assert np.array_equal(fresh.twice_concordant, reused.twice_concordant)
    assert fresh.precision_sum is not None and reused.precision_sum is not None
    assert np.array_equal(fresh.precision_sum, reused.precision_sum)
