"""Linear probes on residual activations: nested grouped CV, frozen transfer, layer curves.

A probe standardises one layer's activations with statistics of its training set only, then fits
an L2 logistic regression with L-BFGS. The regularisation is written as the objective
``mean log-loss + lam * ||w||^2`` (intercept unpenalised); scikit-learn's ``C`` multiplies a *sum*
of losses against ``||w||^2 / 2``, so the two agree when ``C = 1 / (2 * lam * n_train)``
(:func:`lambda_to_c`). Getting this wrong silently shifts every lambda by a factor of 2n.

A fit is scikit-learn's ``LogisticRegression(solver="lbfgs")`` fit, reproduced to rounding by
running the same L-BFGS-B in an orthonormal basis of the span of the training rows (see the
comment above ``_Basis``): when the layer is wider than the training set, each step costs
O(n_train^2) instead of O(n_train * d). :mod:`app.stats.probes_reference` is the plain
scikit-learn statement of the nested CV that this module must match.

Hyperparameters (layer x lambda) are chosen by the mean inner-fold Brier score. Exact or
float-noise ties (within ``TIE_ATOL``) go to the shallower layer, then to the larger lambda: the
simplest model that does as well. All splits are grouped (see :mod:`app.stats.cv_splits`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np
import scipy.linalg
import scipy.optimize
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from app.stats import _validate
from app.stats.cv_splits import Split, check_splits, grouped_folds, inner_seed

__all__ = [
    "BASELINE_FEATURES",
    "LAMBDAS",
    "MISSING_CONFIDENCE",
    "TIE_ATOL",
    "FoldChoice",
    "LinearProbe",
    "NestedCVResult",
    "baseline_matrix",
    "earliest_best_layer",
    "fit_probe",
    "grouped_folds",
    "inner_seed",
    "lambda_to_c",
    "layer_auroc_curve",
    "nested_cv",
    "select_grid_point",
    "select_then_refit",
]

LAMBDAS: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0)
"""Default grid of ``lam`` in ``mean log-loss + lam * ||w||^2``."""

TIE_ATOL = 1e-12
"""Grid points whose mean Brier is within this of the best count as tied."""

# L-BFGS to a tight gradient tolerance, so that a fit is a property of the data and lambda, not
# of the solver's path (a reference implementation must reproduce it to 1e-6).
_TOL = 1e-10
_MAX_ITER = 10_000


_F = TypeVar("_F", bound=Callable[..., Any])


def _one_blas_thread(func: _F) -> _F:
    """Run ``func`` with a single-threaded BLAS, restoring the previous limits afterwards."""

    # These fits are small (hundreds of rows); a multi-threaded BLAS spends more time waking and
    # spinning its threads than computing: on a busy 2-core machine a 210 x 32 fit took 10x
    # longer with it (measured). Parallelism, if wanted, belongs across grid points instead.
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with threadpool_limits(limits=1, user_api="blas"):
            return func(*args, **kwargs)

    return cast(_F, wrapper)


def lambda_to_c(lam: float, n_train: int) -> float:
    """scikit-learn ``C`` equivalent to ``mean log-loss + lam * ||w||^2`` on ``n_train`` items.

    Parameters
    ----------
    lam : float
        Positive regularisation strength.
    n_train : int
        Number of training items.

    Returns
    -------
    float
        ``1 / (2 * lam * n_train)``: scikit-learn minimises ``||w||^2 / 2 + C * sum(loss)``;
        dividing by ``C * n_train`` gives ``mean(loss) + ||w||^2 / (2 * C * n_train)``.

    """
    lam = _lambda(lam)
    if isinstance(n_train, bool) or not isinstance(n_train, int | np.integer) or n_train < 1:
        raise ValueError(f"n_train must be a positive integer, got {n_train!r}")
    return 1.0 / (2.0 * lam * int(n_train))


def _lambda(lam: float) -> float:
    value = float(lam)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"lambda must be a positive finite number, got {lam!r}")
    return value


def _lambdas(lambdas: Sequence[float]) -> NDArray[np.float64]:
    arr = np.array([_lambda(v) for v in lambdas], dtype=np.float64)
    if arr.size == 0:
        raise ValueError("lambdas must hold at least one value")
    if np.unique(arr).size != arr.size:
        raise ValueError(f"lambdas must be distinct, got {list(lambdas)}")
    return arr


def _activations(x: ArrayLike, n: int | None = None, name: str = "x") -> NDArray[np.float64]:
    """Return x as float64 [n, n_layers, d]; a 2-D [n, k] input becomes one layer."""
    arr = np.asarray(x)
    if arr.ndim not in (2, 3):
        raise ValueError(f"{name} must have shape (n, n_layers, d) or (n, d), got {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric, got dtype {arr.dtype}")
    if arr.ndim == 2:
        arr = arr[:, None, :]
    if 0 in arr.shape:
        raise ValueError(f"{name} has an empty axis: shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} items but y has {n}; shapes must agree")
    out = arr.astype(np.float64, copy=False)
    if not np.isfinite(out).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return out


def _both_classes(y: NDArray[np.bool_], name: str = "y") -> None:
    if y.all() or not y.any():
        raise ValueError(f"{name} must contain both classes (0 and 1); a probe needs both")


def _layer(x3: NDArray[np.float64], layer_index: int) -> NDArray[np.float64]:
    if isinstance(layer_index, bool) or not isinstance(layer_index, int | np.integer):
        raise ValueError(f"layer_index must be an integer, got {layer_index!r}")
    if not 0 <= layer_index < x3.shape[1]:
        raise ValueError(f"layer_index {layer_index} out of range for {x3.shape[1]} layer(s)")
    return x3[:, int(layer_index), :]


@dataclass(frozen=True, eq=False)
class LinearProbe:
    """A fitted, frozen probe: standardisation + logistic regression on one layer column.

    ``P(y=1 | x) = expit(((x[:, layer_index] - mean) / scale) @ coef + intercept)``. The arrays
    are copied and made read-only, so a probe cannot change after it was fitted or loaded.
    """

    layer_index: int
    lam: float
    c: float
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float

    def __post_init__(self) -> None:
        arrays = {}
        for name in ("mean", "scale", "coef"):
            arr = np.array(getattr(self, name), dtype=np.float64)
            if arr.ndim != 1 or arr.size == 0 or not np.isfinite(arr).all():
                raise ValueError(f"LinearProbe.{name} must be a non-empty finite 1-D array")
            arr.setflags(write=False)
            arrays[name] = arr
        if not arrays["mean"].shape == arrays["scale"].shape == arrays["coef"].shape:
            raise ValueError("LinearProbe mean, scale and coef must have the same length d")
        if (arrays["scale"] <= 0).any():
            raise ValueError("LinearProbe.scale must be positive")
        if isinstance(self.layer_index, bool) or int(self.layer_index) < 0:
            raise ValueError(f"LinearProbe.layer_index must be >= 0, got {self.layer_index!r}")
        if not np.isfinite(float(self.intercept)):
            raise ValueError("LinearProbe.intercept must be finite")
        for name, arr in arrays.items():
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "layer_index", int(self.layer_index))
        object.__setattr__(self, "lam", float(self.lam))
        object.__setattr__(self, "c", float(self.c))
        object.__setattr__(self, "intercept", float(self.intercept))

    @property
    def n_features(self) -> int:
        """Width d of the layer the probe reads."""
        return int(self.coef.shape[0])

    def decision_function(self, x: ArrayLike) -> NDArray[np.float64]:
        """Logit of ``P(y=1)``: x of shape (n, n_layers, d) or (n, d) -> shape (n,)."""
        arr = np.asarray(x)
        if arr.ndim == 3:
            rows = _layer(_activations(arr), self.layer_index)
        elif arr.ndim == 2:
            rows = _activations(arr)[:, 0, :]
        else:
            raise ValueError(f"x must have shape (n, n_layers, d) or (n, d), got {arr.shape}")
        if rows.shape[1] != self.n_features:
            raise ValueError(
                f"x has width {rows.shape[1]} but the probe was fit on {self.n_features}"
            )
        return ((rows - self.mean) / self.scale) @ self.coef + self.intercept

    def predict_proba(self, x: ArrayLike) -> NDArray[np.float64]:
        """Probability of the positive class.

        Parameters
        ----------
        x : array-like, shape (n, n_layers, d) or (n, d)
            Activations; with three axes, column ``layer_index`` of the layer axis is read.

        Returns
        -------
        ndarray of float64, shape (n,)
            ``P(y=1)`` per item.

        """
        return expit(self.decision_function(x))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (plain ints, floats and lists of floats; exact float round trip)."""
        return {
            "kind": "linear_probe",
            "layer_index": self.layer_index,
            "lam": self.lam,
            "c": self.c,
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LinearProbe:
        """Rebuild a probe written by :meth:`to_dict`; raises ValueError on a malformed dict."""
        if d.get("kind", "linear_probe") != "linear_probe":
            raise ValueError(f"not a linear probe: kind={d.get('kind')!r}")
        names = ("layer_index", "lam", "c", "mean", "scale", "coef", "intercept")
        missing = [k for k in names if k not in d]
        if missing:
            raise ValueError(f"linear probe dict lacks {missing}")
        return cls(**{k: d[k] for k in names})


# --- fitting ------------------------------------------------------------------------------------
#
# A fit is, by definition, what scikit-learn's ``LogisticRegression(C, solver="lbfgs",
# tol=_TOL, max_iter=_MAX_ITER)`` returns on the standardised rows (app.stats.probes_reference
# states it that way, and the tests hold this module to it). scikit-learn runs scipy's L-BFGS-B
# from zero in d + 1 dimensions. Its iterates never leave the span of the training rows (plus
# the intercept): every gradient ``Z^T r / m + 2 lam w`` lies there, and L-BFGS only combines
# gradients. L-BFGS is also invariant under an orthogonal change of coordinates (it uses inner
# products only). So running the very same L-BFGS-B, with the same options, on ``F = Z Q`` for
# an orthonormal basis Q of that span retraces scikit-learn's path (same iterations, same
# stopping point up to rounding), at O(m^2) instead of O(m d) per step when d > m; the weights
# are ``Q beta``. Converging "harder" than scikit-learn would not do: with ftol = 64 eps its
# solutions at small lambda sit ~1e-6 away from the exact optimum, and the reference is the
# contract, so the path, not just the optimum, is what must be reproduced.

_FTOL = 64 * np.finfo(np.float64).eps  # scikit-learn's L-BFGS-B ftol
_MAXLS = 50  # scikit-learn's L-BFGS-B maxls (scipy's default is 20)

# Below this reciprocal condition number of the centred Gram matrix, the Cholesky route would
# lose digits (it squares the condition of the rows); such rows go through a QR of Z^T instead.
_GRAM_RCOND = 1e-8


@dataclass(frozen=True)
class _Basis:
    """Standardised training rows of one layer, in coordinates of an orthonormal basis Q.

    ``coords`` is ``F = Z Q`` (m, r): the rows the optimiser sees. ``weights(beta)`` maps a
    coefficient vector in those coordinates back to feature space, ``w = Q beta`` (d,).
    """

    mean: NDArray[np.float64]
    scale: NDArray[np.float64]
    coords: NDArray[np.float64]
    weights: Callable[[NDArray[np.float64]], NDArray[np.float64]]


def _standardise(rows: NDArray[np.float64]) -> tuple[NDArray[np.float64], ...]:
    """Return (mean, scale, Z) with StandardScaler's statistics of ``rows``."""
    # StandardScaler: population std, and near-constant features keep scale 1 instead of
    # blowing up; its statistics come from the fit set only, so nothing leaks from test items.
    scaler = StandardScaler().fit(rows)
    return scaler.mean_, scaler.scale_, (rows - scaler.mean_) / scaler.scale_


def _centred_complement(m: int) -> NDArray[np.float64]:
    """Householder vector v of the reflection P that maps the all-ones vector onto -sqrt(m) e_1.

    ``P = I - 2 v v^T`` (v of unit norm) is symmetric and orthogonal, and its columns 1..m-1
    (call them H) are an orthonormal basis of the vectors that sum to zero.
    """
    v = np.ones(m)
    v[0] += np.sqrt(m)
    return v / np.linalg.norm(v)


def _reflect(a: NDArray[np.float64], v: NDArray[np.float64]) -> NDArray[np.float64]:
    """``P a`` for ``P = I - 2 v v^T`` (a of shape (m,) or (m, k)), in O(m k)."""
    return a - 2.0 * np.multiply.outer(v, v @ a)


def _gram_basis(z: NDArray[np.float64]) -> tuple[NDArray[np.float64], Callable[..., Any]] | None:
    """Basis of the row span from the Gram matrix ``K = Z Z^T``; None if K is ill-conditioned.

    Z's columns are centred, so ``K 1 = 0`` and the rows span at most m - 1 dimensions: those
    of ``H^T K H = L L^T`` (Cholesky), with H from :func:`_centred_complement`. Then
    ``Q = Z^T H L^{-T}`` is orthonormal and ``F = Z Q = H L``. One BLAS call (m^2 d) and an
    (m-1)^3 / 3 factorisation, against ~4 m^2 d for a Householder QR of Z^T with Q formed.
    """
    m = z.shape[0]
    v = _centred_complement(m)
    gram = z @ z.T
    k_h = _reflect(_reflect(gram, v).T, v)[1:, 1:]  # H^T K H: P K P without its first row/col
    try:
        chol = scipy.linalg.cholesky(k_h, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return None  # rank below m - 1 (e.g. duplicated rows)
    rcond, info = scipy.linalg.lapack.dpocon(chol, np.abs(k_h).sum(axis=0).max(), uplo="L")
    if info != 0 or not rcond >= _GRAM_RCOND:
        return None
    coords = _reflect(np.vstack([np.zeros((1, m - 1)), chol]), v)  # H L = P [0; L]

    def weights(beta: NDArray[np.float64]) -> NDArray[np.float64]:
        a = scipy.linalg.solve_triangular(chol, beta, lower=True, trans="T", check_finite=False)
        return z.T @ _reflect(np.concatenate([[0.0], a]), v)  # Z^T H L^{-T} beta

    return coords, weights


def _basis(rows: NDArray[np.float64]) -> _Basis:
    """Standardise ``rows`` (m, d) and pick the cheapest exact coordinates for the optimiser."""
    mean, scale, z = _standardise(rows)
    m, d = z.shape
    if d < m:  # already narrower than the span of the rows: optimise over w itself
        return _Basis(mean, scale, z, lambda beta: beta)
    gram = _gram_basis(z)
    if gram is not None:
        return _Basis(mean, scale, *gram)
    # Rank-deficient or ill-conditioned rows: Z^T = Q R (backward stable), F = Z Q = R^T.
    q, r = np.linalg.qr(z.T)
    return _Basis(mean, scale, np.ascontiguousarray(r.T), lambda beta: q @ beta)


def _loss_grad(
    beta: NDArray[np.float64], f: NDArray[np.float64], y: NDArray[np.float64], lam: float
) -> tuple[float, NDArray[np.float64]]:
    """``mean log-loss(f @ beta[:-1] + beta[-1]) + lam * ||beta[:-1]||^2`` and its gradient.

    scikit-learn's objective for ``C = 1 / (2 lam m)`` (intercept last and unpenalised).
    """
    coef = beta[:-1]
    t = f @ coef + beta[-1]
    loss = np.mean(np.logaddexp(0.0, t) - y * t) + lam * (coef @ coef)
    r = (expit(t) - y) / y.size
    grad = np.empty_like(beta)
    grad[:-1] = r @ f + 2.0 * lam * coef
    grad[-1] = r.sum()
    return float(loss), grad


def _lbfgs(f: NDArray[np.float64], y: NDArray[np.float64], lam: float) -> NDArray[np.float64]:
    """scikit-learn's L-BFGS-B run (same start, options and stopping rules) on rows ``f``."""
    res = scipy.optimize.minimize(
        _loss_grad,
        np.zeros(f.shape[1] + 1),
        args=(f, y, lam),
        method="L-BFGS-B",
        jac=True,
        options={"maxiter": _MAX_ITER, "maxls": _MAXLS, "gtol": _TOL, "ftol": _FTOL},
    )
    if res.status != 0:  # as scikit-learn does: the fit is still returned
        warnings.warn(
            f"lbfgs failed to converge after {res.nit} iteration(s) (status={res.status}): "
            f"{res.message}",
            ConvergenceWarning,
            stacklevel=2,
        )
    return res.x


def _fit_path(
    rows: NDArray[np.float64], y: NDArray[np.bool_], layer: int, lams: Sequence[float]
) -> list[LinearProbe]:
    """Fit one probe per lambda on validated rows [m, d] with both classes present.

    The standardisation and the basis depend on the rows only, so all lambdas share them. Each
    lambda is still solved from zero, like scikit-learn: a warm start would change the path and
    with it the (approximate) solution.
    """
    basis = _basis(rows)
    target = y.astype(np.float64)
    probes = []
    for lam in lams:
        beta = _lbfgs(basis.coords, target, lam)
        probes.append(
            LinearProbe(
                layer_index=layer,
                lam=lam,
                c=lambda_to_c(lam, rows.shape[0]),
                mean=basis.mean,
                scale=basis.scale,
                coef=basis.weights(beta[:-1]),
                intercept=float(beta[-1]),
            )
        )
    return probes


def _fit(rows: NDArray[np.float64], y: NDArray[np.bool_], layer: int, lam: float) -> LinearProbe:
    """Fit on validated rows [m, d] with both classes present."""
    return _fit_path(rows, y, layer, [lam])[0]


@_one_blas_thread
def fit_probe(x: ArrayLike, y: ArrayLike, *, layer_index: int, lam: float) -> LinearProbe:
    """Fit one probe on one layer of x.

    Parameters
    ----------
    x : array-like, shape (n, n_layers, d) or (n, d)
        Activations (a 2-D array is one layer, ``layer_index`` 0).
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels with both classes.
    layer_index : int
        Column of the layer axis to read.
    lam : float
        Positive ``lam`` of ``mean log-loss + lam * ||w||^2``.

    Returns
    -------
    LinearProbe
        Standardisation fitted on x, and ``LogisticRegression(C=lambda_to_c(lam, n))``.

    """
    labels = _validate.labels(y)
    _both_classes(labels)
    x3 = _activations(x, labels.shape[0])
    return _fit(_layer(x3, layer_index), labels, int(layer_index), _lambda(lam))


def select_grid_point(grid: ArrayLike, lambdas: Sequence[float]) -> tuple[int, int]:
    """Pick ``(layer_index, lambda_position)`` with the smallest mean Brier score.

    Parameters
    ----------
    grid : array-like, shape (n_layers, n_lambdas)
        Mean CV Brier per layer and lambda (NaN = not evaluated).
    lambdas : sequence of float, length n_lambdas
        The lambda of each grid column (any order).

    Returns
    -------
    (int, int)
        Among points within ``TIE_ATOL`` of the minimum: the smallest layer index, then the
        largest lambda (the strongest regularisation); the second int indexes ``lambdas``.

    """
    arr = np.asarray(grid, dtype=np.float64)
    lam = _lambdas(lambdas)
    if arr.ndim != 2 or arr.shape[1] != lam.size or not np.isfinite(arr).any():
        raise ValueError(f"grid must have shape (n_layers, {lam.size}) with a finite value")
    best = np.nanmin(arr)
    tied = np.argwhere(np.nan_to_num(arr, nan=np.inf) <= best + TIE_ATOL)
    layer = int(tied[:, 0].min())
    cols = tied[tied[:, 0] == layer, 1]
    return layer, int(cols[np.argmax(lam[cols])])


def _held_out_brier(
    x3: NDArray[np.float64],
    y: NDArray[np.bool_],
    train_idx: NDArray[np.intp],
    test_idx: NDArray[np.intp],
    layer: int,
    lams: Sequence[float],
) -> NDArray[np.float64]:
    """Brier score on the test items of the probe fitted on the training items, per lambda."""
    probes = _fit_path(x3[train_idx, layer, :], y[train_idx], layer, lams)
    # The probes share the standardisation: standardise the test rows once and score every
    # lambda with one matrix product (what predict_proba computes, one probe at a time).
    z = (x3[test_idx, layer, :] - probes[0].mean) / probes[0].scale
    coef = np.stack([probe.coef for probe in probes], axis=1)
    p = expit(z @ coef + np.array([probe.intercept for probe in probes]))
    return np.mean((p - y[test_idx, None]) ** 2, axis=0)


def _cv_grid(
    x3: NDArray[np.float64], y: NDArray[np.bool_], splits: Sequence[Split], lam: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Mean held-out Brier per (layer, lambda) over the splits whose training part has both classes.

    A training fold with one class cannot fit a logistic regression; it would score every grid
    point alike, so it is left out of the mean instead of being given an arbitrary constant.
    """
    total = np.zeros((x3.shape[1], lam.size))
    used = 0
    for train_idx, test_idx in splits:
        y_train = y[train_idx]
        if y_train.all() or not y_train.any():
            continue
        used += 1
        for layer in range(x3.shape[1]):
            total[layer] += _held_out_brier(x3, y, train_idx, test_idx, layer, lam.tolist())
    if used == 0:
        raise ValueError("no CV training fold holds both classes; cannot select hyperparameters")
    return total / used


def _prepare(
    x: ArrayLike, y: ArrayLike, groups: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.bool_], NDArray[np.intp]]:
    labels = _validate.labels(y)
    _both_classes(labels)
    codes, _ = _validate.keys(groups, labels.shape[0], "groups")
    return _activations(x, labels.shape[0]), labels, codes


@dataclass(frozen=True, eq=False)
class FoldChoice:
    """Hyperparameters selected in one outer fold, with the inner-CV evidence behind them.

    ``inner_brier`` has shape (n_layers, n_lambdas) in the order of the ``lambdas`` given;
    ``inner_splits`` holds the inner ``(train_idx, test_idx)`` pairs as indices into all n items.
    """

    outer_fold: int
    layer_index: int
    lam: float
    inner_brier: np.ndarray
    inner_splits: list[Split] = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class NestedCVResult:
    """Out-of-fold predictions of a nested grouped CV.

    ``oof`` (n,) holds exactly one held-out ``P(y=1)`` per item, ``fold`` (n,) the outer fold
    that predicted it; ``choices`` has one :class:`FoldChoice` per outer fold, and
    ``outer_splits`` the outer ``(train_idx, test_idx)`` pairs (reuse them for baselines).
    """

    oof: np.ndarray
    fold: np.ndarray
    choices: list[FoldChoice]
    outer_splits: list[Split]


@_one_blas_thread
def nested_cv(
    x: ArrayLike,
    y: ArrayLike,
    groups: ArrayLike,
    *,
    lambdas: Sequence[float] = LAMBDAS,
    outer: int = 5,
    inner: int = 3,
    seed: int = 0,
    outer_splits: Sequence[tuple[ArrayLike, ArrayLike]] | None = None,
) -> NestedCVResult:
    """Nested grouped CV: select layer and lambda on inner folds, predict each outer fold once.

    Parameters
    ----------
    x : array-like, shape (n, n_layers, d) or (n, k)
        Activations, or a feature matrix treated as a single layer.
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels with both classes.
    groups : array-like, shape (n,)
        Group key per item (e.g. the question); a group never straddles a split.
    lambdas : sequence of float
        Grid of ``lam`` (see :func:`lambda_to_c`).
    outer, inner : int
        Numbers of outer and inner folds (>= 2).
    seed : int
        Seed of the outer folds; inner folds of outer fold k use ``inner_seed(seed, k)``.
    outer_splits : sequence of (train_idx, test_idx), optional
        Use these outer folds instead of making them (so a baseline runs on the probe's folds);
        ``outer`` is then ignored. They must form a grouped partition of the items.

    Returns
    -------
    NestedCVResult
        ``oof`` and ``fold`` of shape (n,), one :class:`FoldChoice` per outer fold.

    Raises
    ------
    ValueError
        On malformed inputs, too few groups for the folds, or an outer training part holding
        only one class (a class present in a single group).

    """
    x3, labels, codes = _prepare(x, y, groups)
    lam = _lambdas(lambdas)
    seed = _validate.seed_value(seed)
    if outer_splits is None:
        splits = grouped_folds(labels, codes, outer, seed)
    else:
        splits = check_splits(outer_splits, codes, "outer_splits")
    n = labels.shape[0]
    oof = np.full(n, np.nan)
    fold = np.full(n, -1, dtype=np.intp)
    choices: list[FoldChoice] = []
    for k, (train_idx, test_idx) in enumerate(splits):
        y_train = labels[train_idx]
        if y_train.all() or not y_train.any():
            raise ValueError(
                f"outer fold {k}: the training part holds one class only "
                "(is a class confined to a single group?)"
            )
        try:
            local = grouped_folds(y_train, codes[train_idx], inner, inner_seed(seed, k))
        except ValueError as exc:
            raise ValueError(f"outer fold {k}: cannot make inner folds: {exc}") from exc
        # Inner splits index the outer-training part; map them to item indices once, so the
        # grid, the result and any audit all speak about the same items.
        inner_splits = [(train_idx[a], train_idx[b]) for a, b in local]
        grid = _cv_grid(x3, labels, inner_splits, lam)
        layer, j = select_grid_point(grid, lam)
        probe = _fit(x3[train_idx, layer, :], y_train, layer, float(lam[j]))
        oof[test_idx] = probe.predict_proba(x3[test_idx, layer, :])
        fold[test_idx] = k
        choices.append(FoldChoice(k, layer, float(lam[j]), grid, inner_splits))
    return NestedCVResult(oof=oof, fold=fold, choices=choices, outer_splits=splits)


@_one_blas_thread
def select_then_refit(
    x: ArrayLike,
    y: ArrayLike,
    groups: ArrayLike,
    *,
    lambdas: Sequence[float] = LAMBDAS,
    folds: int = 5,
    seed: int = 0,
) -> tuple[LinearProbe, NDArray[np.float64]]:
    """Frozen-transfer probe: choose layer and lambda by grouped CV, then refit on everything.

    Parameters
    ----------
    x : array-like, shape (n, n_layers, d) or (n, k)
        Source activations.
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels with both classes.
    groups : array-like, shape (n,)
        Group key per item.
    lambdas : sequence of float
        Grid of ``lam``.
    folds : int
        Number of grouped CV folds (>= 2).
    seed : int
        Seed of the folds.

    Returns
    -------
    (LinearProbe, ndarray of float64 of shape (n_layers, n_lambdas))
        The probe refit on all n items with the selected ``(layer, lam)`` (same rule as
        :func:`nested_cv`), and the mean CV Brier grid behind the choice. Apply the probe to
        another benchmark as is: no refit, no recalibration.

    """
    x3, labels, codes = _prepare(x, y, groups)
    lam = _lambdas(lambdas)
    splits = grouped_folds(labels, codes, folds, _validate.seed_value(seed))
    grid = _cv_grid(x3, labels, splits, lam)
    layer, j = select_grid_point(grid, lam)
    return _fit(x3[:, layer, :], labels, layer, float(lam[j])), grid


@_one_blas_thread
def layer_auroc_curves(
    x_train: ArrayLike,
    y_train: ArrayLike,
    held_out: Sequence[tuple[ArrayLike, ArrayLike]],
    *,
    lam: float = 1.0,
) -> list[NDArray[np.float64]]:
    """AUROC on each held-out set of a probe fitted on each layer (one fit per layer).

    Parameters
    ----------
    x_train : array-like, shape (n_train, n_layers, d) or (n_train, d)
        Training activations.
    y_train : array-like of {0, 1} or bool, shape (n_train,)
        Training labels with both classes.
    held_out : sequence of (x, y)
        Held-out sets, each ``x`` of shape (n_k, n_layers, d) or (n_k, d) with the training
        layers and width, and ``y`` of shape (n_k,) with both classes.
    lam : float
        Fixed ``lam`` for every layer.

    Returns
    -------
    list of ndarray of float64, each shape (n_layers,)
        Per held-out set, the AUROC of the probe fitted on each layer.

    """
    y_tr = _validate.labels(y_train, "y_train")
    _both_classes(y_tr, "y_train")
    x_tr = _activations(x_train, y_tr.shape[0], "x_train")
    sets = []
    for k, (x, y) in enumerate(held_out):
        y_k = _validate.labels(y, f"y_held_out[{k}]")
        _both_classes(y_k, f"y_held_out[{k}]")
        x_k = _activations(x, y_k.shape[0], f"x_held_out[{k}]")
        if x_tr.shape[1:] != x_k.shape[1:]:
            raise ValueError(
                f"x_train layers/width {x_tr.shape[1:]} != x_held_out[{k}] {x_k.shape[1:]}"
            )
        sets.append((x_k, y_k))
    lam = _lambda(lam)
    curves = [np.empty(x_tr.shape[1]) for _ in sets]
    for layer in range(x_tr.shape[1]):
        probe = _fit(x_tr[:, layer, :], y_tr, layer, lam)
        for curve, (x_k, y_k) in zip(curves, sets, strict=True):
            curve[layer] = roc_auc_score(y_k, probe.predict_proba(x_k[:, layer, :]))
    return curves


def layer_auroc_curve(
    x_train: ArrayLike, y_train: ArrayLike, x_val: ArrayLike, y_val: ArrayLike, *, lam: float = 1.0
) -> NDArray[np.float64]:
    """Validation AUROC of a probe fitted on each layer.

    Parameters
    ----------
    x_train : array-like, shape (n_train, n_layers, d) or (n_train, d)
        Training activations.
    y_train : array-like of {0, 1} or bool, shape (n_train,)
        Training labels with both classes.
    x_val : array-like, shape (n_val, n_layers, d) or (n_val, d)
        Validation activations (same layers and width).
    y_val : array-like of {0, 1} or bool, shape (n_val,)
        Validation labels with both classes.
    lam : float
        Fixed ``lam`` for every layer.

    Returns
    -------
    ndarray of float64, shape (n_layers,)
        AUROC on the validation set of the probe fitted on each layer.

    """
    (curve,) = layer_auroc_curves(x_train, y_train, [(x_val, y_val)], lam=lam)
    return curve


def earliest_best_layer(curve: ArrayLike, tol: float = 0.0) -> int:
    """Earliest layer whose score reaches the maximum (within ``tol``).

    Parameters
    ----------
    curve : array-like, shape (n_layers,)
        Finite score per layer, higher is better (e.g. :func:`layer_auroc_curve`).
    tol : float
        Non-negative slack: the first layer with ``curve >= max(curve) - tol`` wins.

    Returns
    -------
    int
        Index of that layer.

    """
    arr = _validate.scores(curve, name="curve")
    if not (np.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a non-negative finite number, got {tol!r}")
    return int(np.flatnonzero(arr >= arr.max() - tol)[0])


BASELINE_FEATURES: tuple[str, ...] = (
    "confidence",
    "margin",
    "abs_margin",
    "length_diff",
    "abs_length_diff",
    "ab_choice",
)
"""Column names of :func:`baseline_matrix`, in order."""

MISSING_CONFIDENCE = 50.0
"""Value given to a missing verbalised confidence: the midpoint of the 0-100 scale. A constant
(not a training mean) so that imputation needs no fitting and cannot leak across folds."""


def baseline_matrix(
    confidence: ArrayLike, margin: ArrayLike, length_diff: ArrayLike, ab_choice: ArrayLike
) -> NDArray[np.float64]:
    """The six baseline features of the AB judgment, as a matrix for :func:`nested_cv`.

    Parameters
    ----------
    confidence : array-like of float, shape (n,)
        Verbalised confidence (0-100); NaN (unparsed) becomes ``MISSING_CONFIDENCE`` = 50.
    margin : array-like of float, shape (n,)
        Signed verdict-logit margin.
    length_diff : array-like of float, shape (n,)
        Signed response-length difference.
    ab_choice : array-like of {0, 1} or bool, shape (n,)
        The AB judgment's choice, coded 0/1 (the caller fixes which side is 1).

    Returns
    -------
    ndarray of float64, shape (n, 6)
        Columns in the order of ``BASELINE_FEATURES``; the absolute values are computed here.

    """
    conf = np.asarray(confidence, dtype=np.float64)
    if conf.ndim != 1 or conf.size == 0:
        raise ValueError(f"confidence must be one-dimensional with shape (n,), got {conf.shape}")
    if np.isinf(conf).any():
        raise ValueError("confidence contains infinite values (use NaN for missing)")
    n = conf.shape[0]
    conf = np.where(np.isnan(conf), MISSING_CONFIDENCE, conf)
    m = _validate.scores(margin, n, "margin", "confidence")
    ld = _validate.scores(length_diff, n, "length_diff", "confidence")
    choice = _validate.labels(ab_choice, "ab_choice")
    if choice.shape[0] != n:
        raise ValueError(f"ab_choice has {choice.shape[0]} items but confidence has {n}")
    return np.column_stack([conf, m, np.abs(m), ld, np.abs(ld), choice.astype(np.float64)])
