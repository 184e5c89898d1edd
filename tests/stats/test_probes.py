"""Probe numerics: grouped nested CV against a plain scikit-learn reference, C = 1/(2 lambda n)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits

from app.stats import probes
from app.stats.cv_splits import grouped_folds, inner_seed, stratification_possible
from app.stats.probes import (
    BASELINE_FEATURES,
    LAMBDAS,
    MISSING_CONFIDENCE,
    LinearProbe,
    baseline_matrix,
    earliest_best_layer,
    fit_probe,
    lambda_to_c,
    layer_auroc_curve,
    nested_cv,
    select_grid_point,
    select_then_refit,
)
from app.stats.probes_reference import reference_fit_predict, reference_nested_cv


def make_groups(rng: np.random.Generator, n: int) -> np.ndarray:
    """Group ids 0, 0, 1, 1, 1, 2, 2, ... with groups of 2 or 3 items, n items in all."""
    sizes = rng.integers(2, 4, size=n)
    return np.repeat(np.arange(n), sizes)[:n]


def planted(n=400, n_layers=4, d=32, layer=2, strength=2.0, seed=0):
    """Noise activations with one unit direction in ``layer`` shifted by +-strength with y."""
    rng = np.random.default_rng(seed)
    groups = make_groups(rng, n)
    y = rng.integers(0, 2, size=n)
    x = rng.normal(size=(n, n_layers, d))
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    x[:, layer, :] += np.outer(strength * (2 * y - 1), u)
    return x, y, groups, rng


def noise_baseline(rng: np.random.Generator, n: int) -> np.ndarray:
    confidence = rng.integers(0, 101, size=n).astype(float)
    confidence[rng.random(n) < 0.1] = np.nan
    return baseline_matrix(
        confidence,
        rng.normal(size=n),
        rng.normal(scale=200, size=n).round(),
        rng.integers(0, 2, size=n),
    )


def assert_grouped_partition(splits, groups, items):
    """Every split is disjoint by group, and the test folds cover ``items`` exactly once."""
    count = np.zeros(len(groups), dtype=int)
    for train_idx, test_idx in splits:
        assert len(train_idx) and len(test_idx)
        assert set(train_idx) | set(test_idx) == set(items)
        assert not set(groups[train_idx]) & set(groups[test_idx])
        count[test_idx] += 1
    assert (count[items] == 1).all()
    assert count.sum() == len(items)


# --- 1. grouping and exactly one out-of-fold prediction ----------------------------------------


def small_data(kind: str, seed: int = 3):
    rng = np.random.default_rng(seed)
    n = 90
    groups = make_groups(rng, n)
    n_groups = groups.max() + 1
    if kind == "item_labels":
        y = rng.integers(0, 2, size=n)
    elif kind == "group_constant":
        y = rng.integers(0, 2, size=n_groups)[groups]
    else:  # positives confined to 3 groups: fewer than 5 outer folds, so no stratification
        y = np.isin(groups, [1, 7, 20]).astype(int)
    x = rng.normal(size=(n, 2, 4))
    x[:, 1, 0] += y
    return x, y, groups


@pytest.mark.parametrize("kind", ["item_labels", "group_constant", "unstratifiable"])
def test_no_group_straddles_any_outer_or_inner_split(kind):
    x, y, groups = small_data(kind)
    n = len(y)
    assert stratification_possible(y == 1, groups, 5) is (kind != "unstratifiable")
    res = nested_cv(x, y, groups, lambdas=(0.01, 1.0), outer=5, inner=3, seed=11)

    assert len(res.outer_splits) == 5
    assert_grouped_partition(res.outer_splits, groups, np.arange(n))
    assert len(res.choices) == 5
    for k, ((train_idx, test_idx), choice) in enumerate(
        zip(res.outer_splits, res.choices, strict=True)
    ):
        assert choice.outer_fold == k
        assert len(choice.inner_splits) == 3
        # Inner splits partition the outer-training part only: no outer-test item is used.
        assert_grouped_partition(choice.inner_splits, groups, train_idx)
        assert not set(np.concatenate(choice.inner_splits[0])) & set(test_idx)
        assert (res.fold[test_idx] == k).all()

    assert res.oof.shape == (n,)
    assert np.isfinite(res.oof).all() and ((res.oof > 0) & (res.oof < 1)).all()
    assert sorted(np.unique(res.fold)) == list(range(5))


def test_grouped_folds_are_grouped_seeded_and_need_enough_groups():
    rng = np.random.default_rng(0)
    groups = make_groups(rng, 60)
    y = rng.integers(0, 2, size=60)
    a = grouped_folds(y, groups, 4, seed=5)
    assert_grouped_partition(a, groups, np.arange(60))
    b = grouped_folds(y, groups, 4, seed=5)
    c = grouped_folds(y, groups, 4, seed=6)
    assert all(np.array_equal(p[1], q[1]) for p, q in zip(a, b, strict=True))
    assert not all(np.array_equal(p[1], q[1]) for p, q in zip(a, c, strict=True))
    # Stratified when possible: each test fold holds both classes.
    assert all(0 < y[test].mean() < 1 for _, test in a)
    with pytest.raises(ValueError, match="3 groups"):
        grouped_folds([0, 1, 0, 1, 1, 0], [1, 1, 2, 2, 3, 3], 4, seed=0)
    with pytest.raises(ValueError, match="groups has 2 items"):
        grouped_folds([0, 1, 0], [1, 2], 2, seed=0)


def test_caller_outer_splits_are_checked():
    x, y, groups = small_data("item_labels")
    splits = grouped_folds(y, groups, 3, seed=0)
    train_idx, test_idx = splits[0]
    leaky = [(np.append(train_idx, test_idx[0]), test_idx), *splits[1:]]
    with pytest.raises(ValueError, match="both the training and the test side"):
        nested_cv(x, y, groups, outer_splits=leaky)
    with pytest.raises(ValueError, match="exactly one test fold"):
        nested_cv(x, y, groups, outer_splits=splits[:2])


# --- 2. planted direction -----------------------------------------------------------------------


def test_planted_direction_found_in_its_layer_and_baseline_stays_at_chance():
    x, y, groups, rng = planted()
    probe = nested_cv(x, y, groups, seed=1)
    assert [c.layer_index for c in probe.choices] == [2] * 5
    assert roc_auc_score(y, probe.oof) > 0.95

    base_x = noise_baseline(rng, len(y))
    assert base_x.shape == (400, len(BASELINE_FEATURES))
    base = nested_cv(base_x, y, groups, outer_splits=probe.outer_splits, seed=1)
    for (a_tr, a_te), (b_tr, b_te) in zip(probe.outer_splits, base.outer_splits, strict=True):
        np.testing.assert_array_equal(a_tr, b_tr)
        np.testing.assert_array_equal(a_te, b_te)
    np.testing.assert_array_equal(probe.fold, base.fold)
    assert roc_auc_score(y, base.oof) < 0.65


# --- 3. reference implementation (app.stats.probes_reference) ---------------------------------


@pytest.mark.parametrize("kind", ["two_layers", "unstratifiable"])
def test_matches_plain_sklearn_reference(kind):
    rng = np.random.default_rng(7)
    n = 150
    groups = make_groups(rng, n)
    if kind == "two_layers":
        y = rng.integers(0, 2, size=n)
    else:
        y = np.isin(groups, [2, 9, 30, 41]).astype(int)
    x = rng.normal(size=(n, 3, 6))
    x[:, 1, 0] += 0.8 * y  # weak signal in layer 1, stronger in layer 2
    x[:, 2, :2] += 1.2 * y[:, None]
    lambdas = (10.0, 1e-3, 0.1, 1e-4, 1.0, 1e-2)  # not sorted: the tie rule must use values
    res = nested_cv(x, y, groups, lambdas=lambdas, outer=5, inner=3, seed=4)
    with threadpool_limits(limits=1, user_api="blas"):  # small fits: threads only slow them
        oof, chosen, grids = reference_nested_cv(x, y, groups, lambdas, 5, 3, seed=4)

    assert [(c.layer_index, c.lam) for c in res.choices] == chosen
    for choice, grid in zip(res.choices, grids, strict=True):
        np.testing.assert_allclose(choice.inner_brier, grid, atol=1e-8)
    np.testing.assert_allclose(res.oof, oof, atol=1e-6)


def test_wide_layers_match_plain_sklearn_reference():
    # d = 200 > every training set (about 77 and 96 rows): the fits run in the span of the rows.
    rng = np.random.default_rng(1)
    n = 120
    groups = np.repeat(np.arange(n), rng.integers(1, 3, size=n))[:n]
    y = (rng.random(n) < 0.35).astype(int)
    x = rng.normal(size=(n, 2, 200))
    x[:, 1, :3] += y[:, None]
    res = nested_cv(x, y, groups, outer=5, inner=3, seed=1)
    with threadpool_limits(limits=1, user_api="blas"):
        oof, chosen, grids = reference_nested_cv(x, y, groups, LAMBDAS, 5, 3, seed=1)

    assert [(c.layer_index, c.lam) for c in res.choices] == chosen
    assert len(set(chosen)) > 1  # the choice varies across folds, so it is really tested
    for choice, grid in zip(res.choices, grids, strict=True):
        np.testing.assert_allclose(choice.inner_brier, grid, atol=1e-8)
    np.testing.assert_allclose(res.oof, oof, atol=1e-6)


@pytest.mark.parametrize("route", ["narrow", "gram", "qr", "duplicated_rows"])
def test_every_fit_route_reproduces_sklearn(route, monkeypatch):
    rng = np.random.default_rng(11)
    m, d = 60, 150 if route != "narrow" else 20
    x = rng.normal(size=(m, d))
    y = rng.random(m) < 0.4
    x[:, 0] += 2.0 * y
    lambdas = LAMBDAS
    if route == "qr":  # as if the Gram matrix were ill-conditioned
        monkeypatch.setattr(probes, "_GRAM_RCOND", np.inf)
    if route == "duplicated_rows":
        x[1::6] = x[0::6]  # rank below m - 1: the Cholesky route must give way to QR
        assert probes._gram_basis(probes._standardise(x)[2]) is None
        # With exact duplicates scikit-learn's own path is not reproducible to 1e-6 at the
        # smallest lambdas (permuting the columns moves its predictions by ~1e-5 there).
        lambdas = tuple(lam for lam in LAMBDAS if lam >= 0.01)
    if route == "gram":
        assert probes._gram_basis(probes._standardise(x)[2]) is not None
    x_test = rng.normal(size=(30, d))
    for lam in lambdas:
        probe = fit_probe(x, y, layer_index=0, lam=lam)
        with threadpool_limits(limits=1, user_api="blas"):
            expected = reference_fit_predict(x, y, x_test, lam)
        np.testing.assert_allclose(probe.predict_proba(x_test), expected, atol=1e-6)


def test_tie_rule_prefers_shallower_layer_then_larger_lambda():
    lambdas = (1.0, 0.01, 10.0)
    grid = np.array([[0.30, 0.20, 0.20], [0.20, 0.25, 0.20]])
    assert select_grid_point(grid, lambdas) == (0, 2)  # layer 0; lambda 10 over 0.01
    grid = np.array([[0.30, 0.30, 0.30], [0.20, 0.25, 0.20 + 1e-15]])
    assert select_grid_point(grid, lambdas) == (1, 2)  # float-noise ties count as ties
    grid = np.array([[0.30, 0.30, 0.30], [0.20, 0.25, 0.2001]])
    assert select_grid_point(grid, lambdas) == (1, 0)


def test_inner_seed_depends_on_seed_and_fold():
    assert inner_seed(0, 1) == inner_seed(0, 1)
    assert len({inner_seed(0, 0), inner_seed(0, 1), inner_seed(1, 0)}) == 3


# --- 4. lambda <-> C ---------------------------------------------------------------------------


def objective_gradient(xs, y, w, b, lam):
    """Gradient of mean log-loss + lam * ||w||^2 (intercept unpenalised) at (w, b)."""
    p = 1 / (1 + np.exp(-(xs @ w + b)))
    return np.append(xs.T @ (p - y) / len(y) + 2 * lam * w, np.mean(p - y))


def test_lambda_to_c_minimises_mean_loss_plus_lambda_norm():
    rng = np.random.default_rng(2)
    n, d, lam = 120, 5, 0.02
    x = rng.normal(size=(n, d))
    y = (x @ np.array([1.5, -1.0, 0.5, 0.0, 0.0]) + rng.normal(size=n) > 0).astype(float)
    assert lambda_to_c(lam, n) == pytest.approx(1 / (2 * lam * n), rel=1e-15)

    model = LogisticRegression(C=lambda_to_c(lam, n), tol=1e-10, max_iter=10_000).fit(x, y)
    grad = objective_gradient(x, y, model.coef_[0], model.intercept_[0], lam)
    assert np.abs(grad).max() < 1e-5
    # The pitfall C = 1/(lambda n) solves a different problem; the check above would catch it.
    wrong = LogisticRegression(C=1 / (lam * n), tol=1e-10, max_iter=10_000).fit(x, y)
    assert np.abs(objective_gradient(x, y, wrong.coef_[0], wrong.intercept_[0], lam)).max() > 1e-3

    # fit_probe uses the same C, on the standardised layer.
    probe = fit_probe(x, y, layer_index=0, lam=lam)
    assert probe.c == lambda_to_c(lam, n)
    xs = (x - probe.mean) / probe.scale
    assert np.abs(objective_gradient(xs, y, probe.coef, probe.intercept, lam)).max() < 1e-5


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_lambda_must_be_positive(bad):
    with pytest.raises(ValueError, match="lambda"):
        lambda_to_c(bad, 10)


# --- 5. frozen transfer and probe serialisation ------------------------------------------------


def test_select_then_refit_round_trip_and_input_shapes():
    x, y, groups, rng = planted(n=160, n_layers=3, d=8, layer=2, strength=1.5, seed=5)
    probe, grid = select_then_refit(x, y, groups, folds=4, seed=0)
    assert grid.shape == (3, len(LAMBDAS))
    assert probe.layer_index == 2
    assert probe.lam == LAMBDAS[int(np.argmin(grid[2]))]
    # One refit on all of it: same as fitting the chosen point on everything.
    direct = fit_probe(x, y, layer_index=2, lam=probe.lam)
    np.testing.assert_allclose(probe.predict_proba(x), direct.predict_proba(x), atol=1e-12)

    x_new = rng.normal(size=(50, 3, 8))
    p3 = probe.predict_proba(x_new)
    p2 = probe.predict_proba(x_new[:, 2, :])
    assert p3.shape == (50,)
    np.testing.assert_array_equal(p3, p2)

    loaded = LinearProbe.from_dict(json.loads(json.dumps(probe.to_dict())))
    np.testing.assert_array_equal(loaded.predict_proba(x_new), p3)
    assert (loaded.layer_index, loaded.lam, loaded.c) == (probe.layer_index, probe.lam, probe.c)

    with pytest.raises(ValueError):
        probe.coef[0] = 1.0  # frozen: read-only arrays
    with pytest.raises(ValueError, match="width"):
        probe.predict_proba(x_new[:, :, :4])
    with pytest.raises(ValueError, match="layer_index"):
        probe.predict_proba(x_new[:, :2, :])
    with pytest.raises(ValueError, match="lacks"):
        LinearProbe.from_dict({"layer_index": 0})


# --- 6. layer curves ---------------------------------------------------------------------------


def test_earliest_best_layer_takes_first_of_tied_maxima():
    assert earliest_best_layer(np.array([0.6, 0.8, 0.7, 0.8])) == 1
    assert earliest_best_layer(np.array([0.9, 0.6, 0.9])) == 0
    assert earliest_best_layer(np.array([0.6, 0.79, 0.8])) == 2
    assert earliest_best_layer(np.array([0.6, 0.79, 0.8]), tol=0.02) == 1
    with pytest.raises(ValueError):
        earliest_best_layer(np.array([0.6, np.nan]))


def test_layer_auroc_curve_peaks_at_planted_layer():
    x, y, _, _ = planted(n=200, n_layers=4, d=8, layer=2, strength=1.5, seed=9)
    curve = layer_auroc_curve(x[:120], y[:120], x[120:], y[120:], lam=1.0)
    assert curve.shape == (4,)
    assert earliest_best_layer(curve) == 2
    assert curve[2] > 0.9 and np.delete(curve, 2).max() < 0.75


# --- input validation and the baseline matrix --------------------------------------------------


def test_baseline_matrix_columns_and_missing_confidence():
    m = baseline_matrix([80.0, np.nan], [-1.5, 2.0], [-30, 40], [1, 0])
    expected = [[80.0, -1.5, 1.5, -30, 30, 1.0], [MISSING_CONFIDENCE, 2.0, 2.0, 40, 40, 0.0]]
    np.testing.assert_array_equal(m, expected)
    assert MISSING_CONFIDENCE == 50.0
    with pytest.raises(ValueError, match="margin"):
        baseline_matrix([1.0, 2.0], [np.nan, 1.0], [0, 0], [0, 1])
    with pytest.raises(ValueError, match="ab_choice"):
        baseline_matrix([1.0, 2.0], [0.0, 1.0], [0, 0], [0, 2])


def test_inputs_are_validated():
    x, y, groups = small_data("item_labels")
    with pytest.raises(ValueError, match="both classes"):
        nested_cv(x, np.zeros_like(y), groups)
    with pytest.raises(ValueError, match="groups has"):
        nested_cv(x, y, groups[:-1])
    with pytest.raises(ValueError, match="x has"):
        nested_cv(x[:-1], y, groups)
    bad = x.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        nested_cv(bad, y, groups)
    with pytest.raises(ValueError, match="shape"):
        nested_cv(x[:, 0, 0], y, groups)
    with pytest.raises(ValueError, match="only 0 and 1"):
        fit_probe(x, y + 1, layer_index=0, lam=1.0)
    with pytest.raises(ValueError, match="layer_index"):
        fit_probe(x, y, layer_index=2, lam=1.0)
    with pytest.raises(ValueError, match="distinct"):
        nested_cv(x, y, groups, lambdas=(1.0, 1.0))
    with pytest.raises(ValueError, match="one class only"):
        # Positives in a single group: the outer fold holding it trains on negatives only.
        nested_cv(x, np.isin(groups, [4]).astype(int), groups)
