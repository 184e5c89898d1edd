"""Probe estimators against independent numpy/scikit-learn computations on fixed activations."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from app.stats.probe_estimators import (
    ESTIMATORS,
    DiffMeans,
    DirectionProbe,
    LatPca,
    Logistic,
    TokenLogistic,
    TokenProbe,
    TokenRows,
    aggregate_token_scores,
    cross_val_scores,
    decision_scores,
    estimator_layer_curves,
    get_estimator,
    mass_mean_direction,
    paired_items,
    probe_from_dict,
)


def paired_data(n_pairs: int = 40, n_layers: int = 3, d: int = 12, seed: int = 0):
    """Pairs (honest, lie) of one statement: a shared statement vector plus a planted +-shift."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n_pairs, n_layers, d)) * rng.uniform(0.5, 3.0, size=d)
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    x = np.concatenate([base, base]) + rng.normal(scale=0.3, size=(2 * n_pairs, n_layers, d))
    y = np.r_[np.ones(n_pairs), np.zeros(n_pairs)].astype(int)
    x[:, 1, :] += np.outer(1.5 * (2 * y - 1), u) + 4.0  # offset: standardisation must matter
    groups = np.r_[np.arange(n_pairs), np.arange(n_pairs)]
    return x, y, groups, u


def standardised(rows: np.ndarray) -> np.ndarray:
    """Population-std standardisation written out (StandardScaler's, no zero-variance columns)."""
    return (rows - rows.mean(axis=0)) / rows.std(axis=0)


def test_registry_names_match_and_unknown_is_refused():
    assert {"logistic", "mass_mean", "mass_mean_iid", "lat"} <= set(ESTIMATORS)
    assert {"token_logistic_mean", "token_logistic_max"} <= set(ESTIMATORS)
    for name, est in ESTIMATORS.items():
        assert est.name == name
        assert est.level in ("item", "token")
    with pytest.raises(ValueError, match="unknown estimator"):
        get_estimator("nope")


def test_difference_of_means_equals_numpy():
    x, y, groups, _ = paired_data()
    probe = DiffMeans().fit(x, y, groups, layer_index=1)
    z = standardised(x[:, 1, :])
    want = z[y == 1].mean(axis=0) - z[y == 0].mean(axis=0)
    np.testing.assert_allclose(probe.direction, want, atol=1e-10, rtol=0)
    assert probe.layer_index == 1 and probe.slope > 0
    # The Platt scaling changes no ranking: the logit orders items as the raw projection does.
    proj = z @ want
    assert roc_auc_score(y, probe.decision_function(x)) == pytest.approx(roc_auc_score(y, proj))
    np.testing.assert_allclose(probe.decision_function(x), probe.slope * proj + probe.intercept)


@pytest.mark.parametrize("d", [8, 150])  # narrower and wider (Woodbury) than the 80 rows
def test_inverse_covariance_direction_equals_a_direct_solve(d: int):
    rng = np.random.default_rng(d)
    z = rng.normal(size=(80, d)) @ rng.normal(size=(d, d)) / np.sqrt(d)
    y = rng.integers(0, 2, size=80)
    y[:2] = [0, 1]
    s = 0.2
    mu1, mu0 = z[y == 1].mean(0), z[y == 0].mean(0)
    c = z - np.where(y[:, None] == 1, mu1, mu0)
    w = c.T @ c / len(z)
    shrunk = (1 - s) * w + s * np.trace(w) / d * np.eye(d)
    want = np.linalg.solve(shrunk, mu1 - mu0)
    got = mass_mean_direction(z, y, inverse_covariance=True, shrinkage=s)
    np.testing.assert_allclose(got, want, atol=1e-10 * np.abs(want).max(), rtol=0)
    # And it differs from the plain difference of means (the option does something).
    assert np.abs(got / np.linalg.norm(got) - (mu1 - mu0) / np.linalg.norm(mu1 - mu0)).max() > 0.01


def test_lat_direction_is_numpy_first_principal_component():
    x, y, groups, u = paired_data(n_pairs=60, seed=3)
    probe = LatPca(seed=7).fit(x, y, groups, layer_index=1)
    z = standardised(x[:, 1, :])
    pairs = paired_items(y, groups)
    assert pairs.shape == (60, 2) and (y[pairs[:, 0]] == 1).all() and (y[pairs[:, 1]] == 0).all()
    assert (groups[pairs[:, 0]] == groups[pairs[:, 1]]).all()
    # Independent PCA: the same documented random order of each difference, np.cov + eigh.
    flip = np.random.default_rng(7).random(len(pairs)) < 0.5
    diffs = z[pairs[:, 0]] - z[pairs[:, 1]]
    diffs[flip] = -diffs[flip]
    vals, vecs = np.linalg.eigh(np.cov(diffs.T))
    pc = vecs[:, np.argmax(vals)]
    proj = z @ pc
    if proj[y == 1].mean() < proj[y == 0].mean():
        pc = -pc
    cosine = probe.direction @ pc / np.linalg.norm(probe.direction)
    assert cosine > 0.9999
    # Sign fixed from the labels: the positive class projects higher; the planted axis is found.
    assert (z @ probe.direction)[y == 1].mean() > (z @ probe.direction)[y == 0].mean()
    planted = u / x[:, 1, :].std(axis=0)  # the planted shift in standardised coordinates
    assert abs(probe.direction @ planted) / np.linalg.norm(planted) > 0.5


def test_lat_needs_groups_and_two_pairs():
    x, y, _, _ = paired_data(n_pairs=3)
    with pytest.raises(ValueError, match="groups"):
        LatPca().fit(x, y, layer_index=0)
    with pytest.raises(ValueError, match="at least 2 pairs"):
        LatPca().fit(x, y, np.arange(len(y)), layer_index=0)


def test_a_layer_without_spread_scores_every_item_alike():
    # The embeddings of one shared last token ("."): identical rows, both classes.
    x = np.ones((12, 1, 5))
    y = np.tile([0, 1], 6)
    groups = np.repeat(np.arange(6), 2)
    for est in (DiffMeans(), DiffMeans(inverse_covariance=True), LatPca()):
        probe = est.fit(x, y, groups, layer_index=0)
        scores = probe.decision_function(x)
        assert np.ptp(scores) == 0 and roc_auc_score(y, scores) == 0.5


def token_data(n_items: int = 30, seed: int = 0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 6, size=n_items)
    y = rng.integers(0, 2, size=n_items)
    y[:2] = [0, 1]
    u = rng.normal(size=10)
    items = []
    for size, label in zip(sizes, y, strict=True):
        vals = rng.normal(size=(size, 2, 10)) + 2.0
        vals[:, 1, :] += 0.8 * (2 * label - 1) * u
        items.append(vals)
    return TokenRows.from_items(items), y, items


@pytest.mark.parametrize("how", ["mean", "max"])
def test_token_logistic_aggregates_token_logits_by_hand(how: str):
    rows, y, items = token_data()
    lam = 0.05
    probe = TokenLogistic(how, lam=lam).fit(rows, y, layer_index=1)
    assert isinstance(probe, TokenProbe) and probe.layer_index == 1
    # The token fit is scikit-learn's on the standardised token rows, C = 1 / (2 lam T).
    token_x = np.concatenate([it[:, 1, :] for it in items])
    token_y = np.concatenate([np.full(len(it), label) for it, label in zip(items, y, strict=True)])
    mean, std = token_x.mean(0), token_x.std(0)
    ref = LogisticRegression(C=1 / (2 * lam * len(token_y)), tol=1e-10, max_iter=10_000)
    ref.fit((token_x - mean) / std, token_y)
    np.testing.assert_allclose(probe.token.coef, ref.coef_[0], atol=1e-5)
    # Item logit by hand: a plain loop over items, then mean or max.
    agg = np.mean if how == "mean" else np.max
    want = [
        agg(((it[:, 1, :] - mean) / std) @ probe.token.coef + probe.token.intercept) for it in items
    ]
    np.testing.assert_allclose(probe.decision_function(rows), want, atol=1e-9)
    np.testing.assert_allclose(probe.predict_proba(rows), 1 / (1 + np.exp(-np.array(want))))


def test_aggregate_token_scores_and_token_rows_take():
    s = np.array([1.0, 5.0, -2.0, 3.0, 0.5, 0.25])
    off = np.array([0, 2, 3, 6])
    np.testing.assert_allclose(aggregate_token_scores(s, off, "mean"), [3.0, -2.0, 1.25])
    np.testing.assert_allclose(aggregate_token_scores(s, off, "max"), [5.0, -2.0, 3.0])
    with pytest.raises(ValueError):
        aggregate_token_scores(s, np.array([0, 2, 2, 6]), "mean")  # an item with no token
    rows = TokenRows(s.reshape(6, 1, 1), off)
    sub = rows.take([2, 0])
    np.testing.assert_array_equal(sub.values.ravel(), [3.0, 0.5, 0.25, 1.0, 5.0])
    np.testing.assert_array_equal(sub.offsets, [0, 3, 5])


def test_cross_val_scores_use_training_folds_only():
    x, y, groups, _ = paired_data(n_pairs=30, seed=5)
    est = DiffMeans()
    cv = cross_val_scores(est, x, y, groups, layer_index=1, folds=3, seed=0)
    assert np.isfinite(cv.logit).all() and set(cv.fold.tolist()) == {0, 1, 2}
    for k, (train, test) in enumerate(cv.splits):
        assert not set(groups[train]) & set(groups[test])  # pairs stay together
        # The held-out logits are those of a probe whose standardisation saw only `train`.
        z = (x[train, 1] - x[train, 1].mean(0)) / x[train, 1].std(0)
        probe = est.fit(x[train], y[train], groups[train], layer_index=1)
        want_dir = z[y[train] == 1].mean(0) - z[y[train] == 0].mean(0)
        np.testing.assert_allclose(probe.direction, want_dir, atol=1e-10)
        np.testing.assert_allclose(cv.logit[test], probe.decision_function(x[test]))
        assert (cv.fold[test] == k).all()
    assert roc_auc_score(y, cv.logit) > 0.8  # chance is 0.5


def test_layer_curves_find_the_planted_layer_for_every_item_estimator():
    x, y, groups, _ = paired_data(n_pairs=40, seed=2)
    tr, va = np.arange(80) % 40 < 28, np.arange(80) % 40 >= 28
    for name in ("mass_mean", "mass_mean_iid", "lat"):
        (curve,) = estimator_layer_curves(
            ESTIMATORS[name], x[tr], y[tr], [(x[va], y[va])], groups_train=groups[tr]
        )
        assert curve.shape == (3,) and int(np.argmax(curve)) == 1, name
    (curve,) = estimator_layer_curves(Logistic(lam=1.0), x[tr], y[tr], [(x[va], y[va])])
    assert int(np.argmax(curve)) == 1
    # Items given as one-token rows (a statement-end capture) score as the plain array does.
    as_rows = TokenRows.of_items
    (same,) = estimator_layer_curves(
        Logistic(lam=1.0), as_rows(x[tr]), y[tr], [(as_rows(x[va]), y[va])]
    )
    np.testing.assert_array_equal(same, curve)
    probe = Logistic(lam=1.0).fit(x[tr], y[tr], layer_index=1)
    np.testing.assert_array_equal(
        decision_scores(probe, as_rows(x[va])), probe.decision_function(x[va])
    )


def test_probes_round_trip_through_json():
    x, y, groups, _ = paired_data(n_pairs=20)
    rows, ty, _ = token_data()
    probes = [
        (DiffMeans().fit(x, y, groups, layer_index=2), x),
        (LatPca().fit(x, y, groups, layer_index=1), x),
        (Logistic(lam=0.1).fit(x, y, layer_index=1), x),
        (TokenLogistic("max").fit(rows, ty, layer_index=0), rows),
    ]
    for probe, data in probes:
        back = probe_from_dict(json.loads(json.dumps(probe.to_dict())))
        assert type(back) is type(probe)
        np.testing.assert_array_equal(back.decision_function(data), probe.decision_function(data))
    with pytest.raises(ValueError):
        DirectionProbe.from_dict({"kind": "direction_probe"})
