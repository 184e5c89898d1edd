"""Group bootstrap: whole groups, reproducible seeds, paired differences, undefined resamples."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

import app.stats.bootstrap as engine
from app.stats.bootstrap import (
    bootstrap_mean,
    group_bootstrap,
    group_multiplicities,
    percentile_interval,
)

TOL = 1e-12


def grouped_data(n: int = 400, n_groups: int = 90, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    groups = np.array([f"q{k:03d}" for k in rng.integers(0, n_groups, n)])
    y = rng.random(n) < 0.35
    p = np.round(np.clip(0.3 * y + 0.7 * rng.random(n), 0, 1), 2)  # rounded: many ties
    return y, p, groups


def codes(groups: np.ndarray) -> np.ndarray:
    return np.unique(groups, return_inverse=True)[1]


def test_multiplicities_draw_n_groups_with_replacement() -> None:
    m = group_multiplicities(50, 300, seed=1)
    assert m.shape == (300, 50)
    assert (m >= 0).all()
    assert (m.sum(axis=1) == 50).all()
    # Drawing with replacement: some groups repeat and some are left out in most resamples.
    assert (m.max(axis=1) >= 2).mean() > 0.9
    assert ((m == 0).mean(axis=1) > 0.2).mean() > 0.9
    # About 1 - 1/e of the groups appear in a resample.
    assert abs((m > 0).mean() - (1 - np.exp(-1))) < 0.02


def test_replicates_equal_sklearn_on_the_materialised_group_resample() -> None:
    """Each replicate is the metric on all items of the drawn groups, repeated as drawn."""
    y, p, groups = grouped_data()
    result = group_bootstrap(y, p, groups, resamples=40, seed=7, chunk_size=9)
    m = group_multiplicities(np.unique(groups).size, 40, seed=7)
    per_item = m[:, codes(groups)]
    for b in range(40):
        index = np.repeat(np.arange(y.size), per_item[b])
        ys, ps = y[index], p[index]
        assert abs(result.replicates["auroc"][0, b] - roc_auc_score(ys, ps)) <= TOL
        assert abs(result.replicates["auprc"][0, b] - average_precision_score(ys, ps)) <= TOL
        assert abs(result.replicates["brier"][0, b] - brier_score_loss(ys, ps)) <= TOL


def test_groups_are_resampled_whole() -> None:
    # Every group holds one positive and one negative: any resample of whole groups has
    # prevalence exactly 1/2, while resampling items would scatter it.
    n_groups = 200
    groups = np.repeat(np.arange(n_groups), 2)
    y = np.tile([1, 0], n_groups)
    rng = np.random.default_rng(0)
    p = rng.random(2 * n_groups)
    result = group_bootstrap(y, p, groups, metrics=["prevalence", "auroc"], resamples=500)
    assert np.all(result.replicates["prevalence"] == 0.5)
    assert result.estimate("prevalence").ci == [0.5, 0.5]
    assert result.estimate("auroc").ci is not None
    assert result.estimate("auroc").low < result.estimate("auroc").high


def test_same_seed_reproduces_and_another_seed_differs() -> None:
    y, p, groups = grouped_data()
    first = group_bootstrap(y, p, groups, resamples=300, seed=11)
    again = group_bootstrap(y, p, groups, resamples=300, seed=11)
    other = group_bootstrap(y, p, groups, resamples=300, seed=12)
    for metric in ("auroc", "auprc", "brier"):
        assert np.array_equal(first.replicates[metric], again.replicates[metric])
        assert first.estimate(metric) == again.estimate(metric)
        assert not np.array_equal(first.replicates[metric], other.replicates[metric])
        assert first.estimate(metric).ci != other.estimate(metric).ci
        # The point estimate is the full sample's and does not depend on the seed.
        assert first.estimate(metric).value == other.estimate(metric).value


def test_results_do_not_depend_on_chunking_threads_or_item_order() -> None:
    y, p, groups = grouped_data()
    base = group_bootstrap(y, p, groups, resamples=101, seed=3, n_threads=1)
    shuffled = np.random.default_rng(5).permutation(y.size)
    variants = [
        group_bootstrap(y, p, groups, resamples=101, seed=3, n_threads=1, chunk_size=1),
        group_bootstrap(y, p, groups, resamples=101, seed=3, n_threads=2, chunk_size=7),
        group_bootstrap(y, p, groups, resamples=101, seed=3, n_threads=3, chunk_size=50),
        group_bootstrap(y[shuffled], p[shuffled], groups[shuffled], resamples=101, seed=3),
    ]
    for variant in variants:
        for metric in ("auroc", "auprc", "brier"):
            np.testing.assert_allclose(
                variant.replicates[metric], base.replicates[metric], rtol=0, atol=TOL
            )
    for variant in variants[:3]:
        assert all(np.array_equal(variant.replicates[m], base.replicates[m]) for m in base.metrics)


def test_point_values_equal_the_point_metrics() -> None:
    y, p, groups = grouped_data()
    result = group_bootstrap(y, p, groups, metrics=["auroc", "auprc", "brier"], resamples=0)
    assert result.estimate("auroc").value == pytest.approx(roc_auc_score(y, p), abs=TOL)
    assert result.estimate("auprc").value == pytest.approx(average_precision_score(y, p), abs=TOL)
    assert result.estimate("brier").value == pytest.approx(brier_score_loss(y, p), abs=TOL)
    assert result.estimate("auroc").ci is None
    assert result.estimate("auroc").valid == 0


def test_paired_differences_use_the_same_resamples() -> None:
    y, p1, groups = grouped_data()
    p2 = np.clip(p1 + np.random.default_rng(9).normal(0, 0.2, p1.size), 0, 1)
    paired = group_bootstrap(y, [p1, p2], groups, resamples=200, seed=4)
    alone1 = group_bootstrap(y, p1, groups, resamples=200, seed=4)
    alone2 = group_bootstrap(y, p2, groups, resamples=200, seed=4)
    for metric in ("auroc", "auprc", "brier"):
        assert np.array_equal(paired.replicates[metric][0], alone1.replicates[metric][0])
        assert np.array_equal(paired.replicates[metric][1], alone2.replicates[metric][0])
        deltas = alone1.replicates[metric][0] - alone2.replicates[metric][0]
        diff = paired.difference(metric)
        low, high = np.percentile(deltas, [2.5, 97.5])
        # 100 * (1 - 0.95) / 2 is 2.4999999999999996 in floating point, which can move the
        # interpolated percentile by an ulp.
        assert diff.estimate.ci == pytest.approx([low, high], rel=1e-12, abs=1e-15)
        better = deltas < 0 if metric == "brier" else deltas > 0
        assert diff.first_better == better.mean()
        assert diff.estimate.value == pytest.approx(
            paired.point[metric][0] - paired.point[metric][1], abs=0
        )


def test_identical_detectors_differ_by_exactly_zero() -> None:
    y, p, groups = grouped_data()
    diff = group_bootstrap(y, [p, p.copy()], groups, resamples=100).difference("auroc")
    assert diff.estimate.value == 0.0
    assert diff.estimate.ci == [0.0, 0.0]
    assert diff.first_better == 0.0  # ties are not wins


def test_undefined_resamples_are_dropped_and_counted() -> None:
    # The only positive sits in group "g0": resamples that miss it have one class.
    groups = np.array(["g0", "g1", "g1", "g2", "g3", "g4"])
    y = np.array([1, 0, 0, 0, 0, 0])
    p = np.array([0.9, 0.2, 0.4, 0.1, 0.3, 0.5])
    result = group_bootstrap(y, p, groups, metrics=["auroc", "auprc"], resamples=400, seed=2)
    drawn = group_multiplicities(5, 400, seed=2)[:, 0] > 0
    assert 0 < drawn.sum() < 400
    for metric in ("auroc", "auprc"):
        replicates = result.replicates[metric][0]
        assert np.array_equal(np.isnan(replicates), ~drawn)
        assert result.estimate(metric).valid == drawn.sum()
    # Where defined, the lone positive outranks every negative.
    assert result.estimate("auroc").ci == [1.0, 1.0]


def test_undefined_everywhere_gives_none_not_half() -> None:
    y = np.zeros(30, dtype=int)
    p = np.linspace(0, 1, 30)
    groups = np.arange(30) // 3
    result = group_bootstrap(y, p, groups, metrics=["auroc", "auprc", "brier"], resamples=50)
    for metric in ("auroc", "auprc"):
        estimate = result.estimate(metric)
        assert estimate.value is None
        assert estimate.ci is None
        assert estimate.valid == 0
    assert result.estimate("brier").value is not None


def test_choice_matched_and_accuracy_replicates() -> None:
    y, p, groups = grouped_data()
    choice = np.where(np.random.default_rng(1).random(y.size) < 0.5, "A", "B")
    result = group_bootstrap(
        y,
        p,
        groups,
        metrics=["choice_matched_auroc", "accuracy", "prevalence"],
        choice=choice,
        threshold=0.4,
        resamples=30,
        seed=8,
    )
    per_item = group_multiplicities(np.unique(groups).size, 30, seed=8)[:, codes(groups)]
    for b in range(30):
        index = np.repeat(np.arange(y.size), per_item[b])
        ys, ps, cs = y[index], p[index], choice[index]
        pairs = ys[:, None] & ~ys[None, :] & (cs[:, None] == cs[None, :])
        wins = (ps[:, None] > ps[None, :]) + 0.5 * (ps[:, None] == ps[None, :])
        expected = wins[pairs].sum() / pairs.sum()
        assert abs(result.replicates["choice_matched_auroc"][0, b] - expected) <= TOL
        accuracy = np.mean((ps >= 0.4) == ys)
        assert abs(result.replicates["accuracy"][0, b] - accuracy) <= TOL
        assert abs(result.replicates["prevalence"][0, b] - ys.mean()) <= TOL


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_replicates_match_materialised_resamples_property(data: st.DataObject) -> None:
    n = data.draw(st.integers(2, 30))
    y = data.draw(arrays(np.bool_, n))
    values = data.draw(st.lists(st.floats(0, 1), min_size=1, max_size=4, unique=True))
    p = data.draw(arrays(np.float64, n, elements=st.sampled_from(values)))
    groups = data.draw(arrays(np.int64, n, elements=st.integers(0, max(1, n // 3))))
    seed = data.draw(st.integers(0, 2**32 - 1))
    result = group_bootstrap(y, p, groups, resamples=5, seed=seed)
    per_item = group_multiplicities(np.unique(groups).size, 5, seed=seed)[:, codes(groups)]
    for b in range(5):
        index = np.repeat(np.arange(n), per_item[b])
        ys, ps = y[index], p[index]
        auroc = result.replicates["auroc"][0, b]
        if ys.any() and not ys.all():
            assert abs(auroc - roc_auc_score(ys, ps)) <= TOL
        else:
            assert np.isnan(auroc)
        if ys.any():
            ap = average_precision_score(ys, ps)
            assert abs(result.replicates["auprc"][0, b] - ap) <= TOL
        assert abs(result.replicates["brier"][0, b] - brier_score_loss(ys, ps)) <= TOL


def test_bootstrap_mean_shares_the_resamples_of_group_bootstrap() -> None:
    y, p, groups = grouped_data()
    mean = bootstrap_mean(y.astype(float), groups, resamples=300, seed=6)
    prevalence = group_bootstrap(
        y, p, groups, metrics=["prevalence"], resamples=300, seed=6
    ).estimate("prevalence")
    assert mean.value == pytest.approx(y.mean(), abs=0)
    assert mean.ci is not None
    assert mean.ci == pytest.approx(prevalence.ci, abs=TOL)
    assert mean.valid == 300


def test_percentile_interval_ignores_nan_and_reports_count() -> None:
    values = np.array([np.nan, 1.0, 2.0, 3.0, np.nan, 4.0])
    low, high, valid = percentile_interval(values, level=0.5)
    assert (low, high, valid) == (1.75, 3.25, 4)
    assert percentile_interval([np.nan, np.nan]) == (None, None, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metrics": ["auroc", "f1"]}, "unknown metrics"),
        ({"metrics": []}, "unknown metrics"),
        ({"metrics": ["choice_matched_auroc"]}, "needs choice"),
        ({"resamples": -1}, "resamples must be >= 0"),
        ({"resamples": 2.5}, "resamples must be an integer"),
        ({"level": 1.0}, "level"),
        ({"seed": -1}, "seed must be a non-negative integer"),
        ({"seed": "7"}, "seed must be a non-negative integer"),
        ({"seed": True}, "seed must be a non-negative integer"),
        ({"n_threads": 0}, "n_threads"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"metrics": ["accuracy"], "threshold": float("inf")}, "threshold"),
        ({"groups": ["a", "b"]}, "shapes must be equal"),
        ({"groups": ["a", None, "b", "c"]}, "missing"),
        ({"p": [0.1, 0.2, 0.3, 1.5]}, "brier needs probabilities"),
        ({"choice": ["A"], "metrics": ["choice_matched_auroc"]}, "shapes must be equal"),
    ],
)
def test_group_bootstrap_validates_inputs(kwargs: dict, message: str) -> None:
    arguments = {
        "y": [0, 1, 0, 1],
        "p": [0.1, 0.8, 0.3, 0.6],
        "groups": ["a", "a", "b", "c"],
        "resamples": 10,
    }
    arguments.update(kwargs)
    y, p, groups = arguments.pop("y"), arguments.pop("p"), arguments.pop("groups")
    with pytest.raises(ValueError, match=message):
        group_bootstrap(y, p, groups, **arguments)


def test_estimate_of_a_metric_not_computed_raises() -> None:
    result = group_bootstrap([0, 1], [0.2, 0.7], ["a", "b"], metrics=["auroc"], resamples=5)
    with pytest.raises(ValueError, match="was not computed"):
        result.estimate("brier")


def test_group_keys_of_any_scalar_type_give_the_same_resamples() -> None:
    y = np.array([0, 1, 1, 0, 1, 0, 0, 1])
    p = np.array([0.1, 0.9, 0.4, 0.3, 0.8, 0.2, 0.6, 0.7])
    as_ints = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    as_strings = np.array(["a", "a", "b", "b", "c", "c", "d", "d"])
    mixed = np.array([0, 0, "b", "b", "c", "c", "d", "d"], dtype=object)
    results = [
        group_bootstrap(y, p, keys, metrics=["auroc"], resamples=60, seed=1)
        for keys in (as_ints, as_strings, mixed)
    ]
    assert np.array_equal(results[0].replicates["auroc"], results[1].replicates["auroc"])
    # Mixed types cannot be sorted together; they are ordered by type name, then value, so
    # the coding is still deterministic (though not the same as the all-string coding).
    again = group_bootstrap(y, p, mixed.copy(), metrics=["auroc"], resamples=60, seed=1)
    assert np.array_equal(results[2].replicates["auroc"], again.replicates["auroc"])
    assert results[2].n_groups == 4


def test_kept_draws_give_the_resamples_drawn_chunk_by_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Small draws are kept and shared; the replicates equal those of fresh per-chunk draws."""
    y, p, groups = grouped_data()
    n_groups = np.unique(groups).size
    kept = group_bootstrap(y, [p, 1 - p], groups, resamples=150, seed=21, chunk_size=16)
    drawn = engine._KEPT.get(21, 150, n_groups)
    assert drawn is engine._KEPT.get(21, 150, n_groups) and not drawn.flags.writeable
    assert np.array_equal(drawn, group_multiplicities(n_groups, 150, seed=21))
    monkeypatch.setattr(engine, "_KEPT_DRAW_ELEMENTS", 0)  # every chunk draws its own
    fresh = group_bootstrap(y, [p, 1 - p], groups, resamples=150, seed=21, chunk_size=16)
    for metric in kept.metrics:
        assert np.array_equal(kept.replicates[metric], fresh.replicates[metric], equal_nan=True)
