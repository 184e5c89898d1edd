"""Readable reference for :func:`app.stats.probes.nested_cv`, written with scikit-learn alone.

This is the plain, loop-by-loop version of the nested grouped CV: for every outer fold, every
inner fold, every layer and every lambda it standardises the training rows with
``StandardScaler`` and fits ``LogisticRegression(C=1 / (2 * lam * n_train), tol=1e-10)``. It
shares no code with :mod:`app.stats.probes` on purpose (not even the fold helpers), so that the
tests (``tests/stats/test_probes.py``) and the benchmark (``benchmarks/probe_bench.py``) compare
the optimised implementation against an independent statement of the same procedure: the same
folds, the same selected ``(layer, lambda)`` per outer fold and the same out-of-fold
predictions (to 1e-6).

It is not used by the application; it is slow (one full-width scikit-learn fit per grid point)
and validates nothing. Run it with a single-threaded BLAS (``threadpool_limits(1, "blas")``):
the fits are small, and threads only slow them down.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss
from sklearn.model_selection import GroupKFold, StratifiedGroupKFold
from sklearn.preprocessing import StandardScaler

__all__ = ["reference_fit_predict", "reference_folds", "reference_nested_cv"]


def reference_folds(y: np.ndarray, groups: np.ndarray, k: int, seed: int) -> list:
    """Grouped k-fold ``(train, test)`` pairs; stratified when k groups hold each class."""
    stratify = len(set(groups[y == 1])) >= k and len(set(groups[y == 0])) >= k
    if stratify:
        splitter = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
    else:
        splitter = GroupKFold(n_splits=k, shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(len(y)), y, groups))


def reference_fit_predict(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, lam: float
) -> np.ndarray:
    """Standardise on the training rows, fit the L2 logistic regression, return P(y=1) on test."""
    scaler = StandardScaler().fit(x_train)
    model = LogisticRegression(C=1 / (2 * lam * len(y_train)), tol=1e-10, max_iter=10_000)
    model.fit(scaler.transform(x_train), y_train)
    return model.predict_proba(scaler.transform(x_test))[:, 1]


def reference_nested_cv(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    lambdas: Sequence[float],
    outer: int,
    inner: int,
    seed: int,
) -> tuple[np.ndarray, list[tuple[int, float]], list[np.ndarray]]:
    """Nested grouped CV written out with scikit-learn alone, loop by loop.

    Parameters
    ----------
    x : ndarray, shape (n, n_layers, d)
        Activations.
    y : ndarray of {0, 1}, shape (n,)
        Labels.
    groups : ndarray, shape (n,)
        Integer group key per item.
    lambdas : sequence of float
        Grid of ``lam`` in ``mean log-loss + lam * ||w||^2``.
    outer, inner : int
        Numbers of outer and inner folds.
    seed : int
        Seed of the outer folds; outer fold k's inner folds use
        ``SeedSequence([seed, k]).generate_state(1)[0]``.

    Returns
    -------
    (ndarray, list of (int, float), list of ndarray)
        Out-of-fold ``P(y=1)`` (n,), the chosen ``(layer, lam)`` per outer fold, and the mean
        inner Brier grid (n_layers, n_lambdas) per outer fold. Ties within 1e-12 of the best
        go to the shallower layer, then to the larger lambda.

    """
    n_layers = x.shape[1]
    oof = np.full(len(y), np.nan)
    chosen, grids = [], []
    for k, (tr, te) in enumerate(reference_folds(y, groups, outer, seed)):
        x_o, y_o, g_o = x[tr], y[tr], groups[tr]
        s_in = int(np.random.SeedSequence([seed, k]).generate_state(1)[0])
        inner_splits = reference_folds(y_o, g_o, inner, s_in)
        grid = np.zeros((n_layers, len(lambdas)))
        for layer in range(n_layers):
            for j, lam in enumerate(lambdas):
                scores = []
                for a, b in inner_splits:
                    p = reference_fit_predict(x_o[a, layer], y_o[a], x_o[b, layer], lam)
                    scores.append(brier_score_loss(y_o[b], p))
                grid[layer, j] = np.mean(scores)
        best = grid.min()
        tied = [
            (layer, lam)
            for layer in range(n_layers)
            for j, lam in enumerate(lambdas)
            if grid[layer, j] <= best + 1e-12
        ]
        layer = min(t[0] for t in tied)
        lam = max(t[1] for t in tied if t[0] == layer)
        oof[te] = reference_fit_predict(x_o[:, layer], y_o, x[te, layer], lam)
        chosen.append((layer, lam))
        grids.append(grid)
    return oof, chosen, grids
