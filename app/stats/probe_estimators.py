"""Probe estimators beside logistic regression: mass-mean, LAT (RepE) and token-level LR.

Every estimator reads one layer column of the activations, standardises it with statistics of
its training rows only (StandardScaler's, as :mod:`app.stats.probes` does), and returns a frozen
probe whose ``decision_function`` is a logit and whose ``predict_proba`` is its ``expit``. Folds
are grouped (:func:`app.stats.cv_splits.grouped_folds`), so a group never straddles a split.

- ``logistic``: :mod:`app.stats.probes`' L2 logistic regression (lambda fixed, or chosen by
  grouped CV on the training rows).
- ``mass_mean``: the difference of the class means (Marks & Tegmark's mass-mean probe);
  ``mass_mean_iid`` multiplies it by the inverse of the shrunk within-class covariance.
- ``lat``: Zou et al.'s LAT: the first principal component of the differences of paired items
  (pairs: a positive and a negative item of one group), its sign fixed so that the positive
  class projects higher on the training rows.
- ``token_logistic_mean`` / ``token_logistic_max``: logistic regression fitted on every token of
  every training item (each token carries its item's label); an item's logit is the mean or the
  max of its tokens' logits (Goldowsky-Dill et al.).

Direction estimators (mass-mean, LAT) give a direction, not a probability: their projection is
mapped to a logit by a one-feature logistic regression fitted on the same training rows (Platt
scaling), which changes no ranking (AUROC) and gives the Brier score and a threshold a scale.

Estimators are registered by name in :data:`ESTIMATORS`; they are frozen dataclasses, so a
variant (another lambda, another shrinkage) is one constructor call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, Protocol, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit
from sklearn.metrics import roc_auc_score

from app.stats import _validate
from app.stats.cv_splits import Split, grouped_folds
from app.stats.probes import (
    LAMBDAS,
    LinearProbe,
    _activations,
    _both_classes,
    _layer,
    _one_blas_thread,
    _standardise,
    fit_probe,
    select_then_refit,
)

__all__ = [
    "AGGREGATIONS",
    "ESTIMATORS",
    "CrossValScores",
    "DiffMeans",
    "DirectionProbe",
    "Estimator",
    "LatPca",
    "Logistic",
    "Probe",
    "TokenLogistic",
    "TokenProbe",
    "TokenRows",
    "aggregate_token_scores",
    "cross_val_scores",
    "decision_scores",
    "estimator_layer_curves",
    "get_estimator",
    "lat_direction",
    "mass_mean_direction",
    "paired_items",
    "probe_from_dict",
]

Aggregation = Literal["mean", "max"]
AGGREGATIONS: tuple[str, ...] = ("mean", "max")
"""How a token-level probe turns its tokens' logits into the item's logit."""

CALIBRATION_LAMBDA = 1e-2
"""``lam`` of the one-feature logistic regression that scales a direction's projection."""

DEFAULT_SHRINKAGE = 0.1
"""Weight of the isotropic target in the shrunk within-class covariance (``mass_mean_iid``)."""


# --- ragged token activations -------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class TokenRows:
    """Activations of a variable number of tokens per item.

    ``values`` has shape (n_tokens, n_layers, d); the tokens of item ``i`` are the rows
    ``offsets[i]:offsets[i + 1]`` (``offsets`` of shape (n_items + 1,), starting at 0,
    non-decreasing, ending at n_tokens). Every item must hold at least one token.
    """

    values: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        values = np.asarray(self.values)
        if values.ndim == 2:
            values = values[:, None, :]
        if values.ndim != 3:
            raise ValueError(f"values must have shape (n_tokens, n_layers, d), got {values.shape}")
        offsets = np.asarray(self.offsets, dtype=np.int64)
        if offsets.ndim != 1 or offsets.size < 2 or offsets[0] != 0:
            raise ValueError("offsets must be 1-D, start at 0 and hold n_items + 1 entries")
        if offsets[-1] != values.shape[0]:
            raise ValueError(f"offsets end at {offsets[-1]} but there are {values.shape[0]} tokens")
        if (np.diff(offsets) < 1).any():
            raise ValueError("every item needs at least one token (offsets must increase)")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "offsets", offsets)

    @classmethod
    def of_items(cls, x: ArrayLike) -> TokenRows:
        """One token per item: x of shape (n, n_layers, d) or (n, d)."""
        arr = _activations(x)
        return cls(arr, np.arange(arr.shape[0] + 1))

    @classmethod
    def from_items(cls, items: Sequence[ArrayLike]) -> TokenRows:
        """Stack per-item arrays, each of shape (n_tokens_i, n_layers, d)."""
        parts = [np.asarray(a) for a in items]
        if not parts:
            raise ValueError("no items")
        offsets = np.concatenate([[0], np.cumsum([p.shape[0] for p in parts])])
        return cls(np.concatenate(parts), offsets)

    @property
    def n_items(self) -> int:
        """Number of items."""
        return int(self.offsets.size - 1)

    @property
    def n_tokens(self) -> np.ndarray:
        """Tokens per item, shape (n_items,)."""
        return np.diff(self.offsets)

    def item_of_token(self) -> NDArray[np.intp]:
        """The item of every token row, shape (n_tokens,)."""
        return np.repeat(np.arange(self.n_items), self.n_tokens)

    def take(self, items: ArrayLike) -> TokenRows:
        """The rows of the given items, in that order."""
        idx = np.asarray(items, dtype=np.intp)
        rows = [np.arange(self.offsets[i], self.offsets[i + 1]) for i in idx]
        sizes = [r.size for r in rows]
        flat = np.concatenate(rows) if rows else np.empty(0, np.intp)
        return TokenRows(self.values[flat], np.concatenate([[0], np.cumsum(sizes)]))


ProbeInput = np.ndarray | TokenRows
"""Item activations (n, n_layers, d) or (n, d), or :class:`TokenRows`."""


def _n_items(x: ProbeInput) -> int:
    return x.n_items if isinstance(x, TokenRows) else int(np.asarray(x).shape[0])


def _take(x: ProbeInput, idx: NDArray[np.intp]) -> ProbeInput:
    return x.take(idx) if isinstance(x, TokenRows) else np.asarray(x)[idx]


def _item_layer(x: ProbeInput, layer_index: int, name: str = "x") -> NDArray[np.float64]:
    """One layer of item activations, (n, d); token rows are refused (an item-level estimator)."""
    if isinstance(x, TokenRows):
        if (x.n_tokens != 1).any():
            raise ValueError(f"{name}: this estimator reads one token per item, not token rows")
        x = x.values
    arr = np.asarray(x)
    x3 = _activations(arr, name=name)
    return _layer(x3, layer_index) if arr.ndim == 3 else x3[:, 0, :]


def aggregate_token_scores(
    scores: ArrayLike, offsets: ArrayLike, how: Aggregation
) -> NDArray[np.float64]:
    """Per-item mean or max of token scores.

    Parameters
    ----------
    scores : array-like of float, shape (n_tokens,)
        One score (logit) per token.
    offsets : array-like of int, shape (n_items + 1,)
        Item ``i`` owns ``scores[offsets[i]:offsets[i + 1]]`` (at least one token each).
    how : {"mean", "max"}
        The aggregation.

    Returns
    -------
    ndarray of float64, shape (n_items,)

    """
    s = _validate.scores(scores, name="scores")
    off = np.asarray(offsets, dtype=np.int64)
    if off.ndim != 1 or off[0] != 0 or off[-1] != s.size or (np.diff(off) < 1).any():
        raise ValueError("offsets must start at 0, increase strictly and end at len(scores)")
    starts = off[:-1]
    if how == "mean":
        return np.add.reduceat(s, starts) / np.diff(off)
    if how == "max":
        return np.maximum.reduceat(s, starts)
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {how!r}")


# --- probes -------------------------------------------------------------------------------------


class Probe(Protocol):
    """A fitted probe: logits and probabilities per item, and a JSON form."""

    layer_index: int

    def decision_function(self, x: Any) -> NDArray[np.float64]:
        """Logit per item, shape (n,)."""
        ...

    def predict_proba(self, x: Any) -> NDArray[np.float64]:
        """``expit`` of the logit, shape (n,)."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        ...


def _frozen_vector(value: ArrayLike, name: str) -> NDArray[np.float64]:
    arr = np.array(value, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0 or not np.isfinite(arr).all():
        raise ValueError(f"{name} must be a non-empty finite 1-D array")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class DirectionProbe:
    """A direction in a standardised layer, with a fitted logit scale.

    ``logit(x) = slope * (((x[:, layer_index] - mean) / scale) @ direction) + intercept``;
    ``direction`` is what the estimator found (for mass-mean the difference of class means,
    for LAT the unit first principal component), ``slope`` and ``intercept`` the Platt scaling
    of its projection on the training rows.
    """

    estimator: str
    layer_index: int
    mean: np.ndarray
    scale: np.ndarray
    direction: np.ndarray
    slope: float
    intercept: float

    def __post_init__(self) -> None:
        for name in ("mean", "scale", "direction"):
            object.__setattr__(self, name, _frozen_vector(getattr(self, name), name))
        if not self.mean.shape == self.scale.shape == self.direction.shape:
            raise ValueError("DirectionProbe mean, scale and direction must have one length d")
        if (self.scale <= 0).any():
            raise ValueError("DirectionProbe.scale must be positive")
        if not (np.isfinite(self.slope) and np.isfinite(self.intercept)):
            raise ValueError("DirectionProbe slope and intercept must be finite")
        object.__setattr__(self, "layer_index", int(self.layer_index))
        object.__setattr__(self, "slope", float(self.slope))
        object.__setattr__(self, "intercept", float(self.intercept))

    def projection(self, x: ProbeInput) -> NDArray[np.float64]:
        """``z @ direction`` per item, shape (n,); x of shape (n, n_layers, d) or (n, d)."""
        rows = _item_layer(x, self.layer_index)
        if rows.shape[1] != self.direction.size:
            raise ValueError(f"x has width {rows.shape[1]}, the probe {self.direction.size}")
        return ((rows - self.mean) / self.scale) @ self.direction

    def decision_function(self, x: ProbeInput) -> NDArray[np.float64]:
        """Logit per item, shape (n,)."""
        return self.slope * self.projection(x) + self.intercept

    def predict_proba(self, x: ProbeInput) -> NDArray[np.float64]:
        """``P(y=1)`` per item, shape (n,)."""
        return expit(self.decision_function(x))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (exact float round trip)."""
        return {
            "kind": "direction_probe",
            "estimator": self.estimator,
            "layer_index": self.layer_index,
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "direction": self.direction.tolist(),
            "slope": self.slope,
            "intercept": self.intercept,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DirectionProbe:
        """Inverse of :meth:`to_dict`; ValueError on a malformed dict."""
        names = ("estimator", "layer_index", "mean", "scale", "direction", "slope", "intercept")
        missing = [k for k in names if k not in d]
        if d.get("kind") != "direction_probe" or missing:
            raise ValueError(f"not a direction probe (kind={d.get('kind')!r}, lacks {missing})")
        return cls(**{k: d[k] for k in names})


@dataclass(frozen=True, eq=False)
class TokenProbe:
    """A token-level logistic regression whose item logit aggregates its tokens' logits."""

    token: LinearProbe
    aggregation: Aggregation

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}")

    @property
    def layer_index(self) -> int:
        """The layer column read."""
        return self.token.layer_index

    def token_scores(self, x: ProbeInput) -> NDArray[np.float64]:
        """Logit per token, shape (n_tokens,)."""
        rows = x if isinstance(x, TokenRows) else TokenRows.of_items(x)
        return self.token.decision_function(rows.values)

    def decision_function(self, x: ProbeInput) -> NDArray[np.float64]:
        """Aggregated logit per item, shape (n_items,)."""
        rows = x if isinstance(x, TokenRows) else TokenRows.of_items(x)
        return aggregate_token_scores(self.token_scores(rows), rows.offsets, self.aggregation)

    def predict_proba(self, x: ProbeInput) -> NDArray[np.float64]:
        """``expit`` of the aggregated logit, shape (n_items,)."""
        return expit(self.decision_function(x))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "kind": "token_probe",
            "aggregation": self.aggregation,
            "token": self.token.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TokenProbe:
        """Inverse of :meth:`to_dict`; ValueError on a malformed dict."""
        if d.get("kind") != "token_probe" or "token" not in d or "aggregation" not in d:
            raise ValueError(f"not a token probe: kind={d.get('kind')!r}")
        return cls(LinearProbe.from_dict(d["token"]), d["aggregation"])


def probe_from_dict(d: dict[str, Any]) -> LinearProbe | DirectionProbe | TokenProbe:
    """Rebuild any probe of this module (or a :class:`LinearProbe`) from its ``to_dict`` form."""
    kind = d.get("kind", "linear_probe")
    if kind == "direction_probe":
        return DirectionProbe.from_dict(d)
    if kind == "token_probe":
        return TokenProbe.from_dict(d)
    return LinearProbe.from_dict(d)


# --- directions ---------------------------------------------------------------------------------


def mass_mean_direction(
    z: ArrayLike,
    y: ArrayLike,
    *,
    inverse_covariance: bool = False,
    shrinkage: float = DEFAULT_SHRINKAGE,
) -> NDArray[np.float64]:
    """Difference of class means, optionally times the inverse shrunk within-class covariance.

    Parameters
    ----------
    z : array-like of float, shape (m, d)
        Rows (already standardised by the caller, if wanted).
    y : array-like of {0, 1} or bool, shape (m,)
        Labels with both classes.
    inverse_covariance : bool
        Return ``S^{-1} (mu_1 - mu_0)`` instead of ``mu_1 - mu_0``.
    shrinkage : float
        ``s`` in ``S = (1 - s) W + s (trace(W) / d) I``, where ``W`` is the pooled within-class
        covariance ``sum_c sum_{i in c} (z_i - mu_c)(z_i - mu_c)^T / m``; in (0, 1] so that ``S``
        is invertible when d >= m.

    Returns
    -------
    ndarray of float64, shape (d,)
        With no within-class spread at all (``W = 0``) the inverse covariance has no effect.

    """
    labels = _validate.labels(y)
    _both_classes(labels)
    rows = _activations(z, labels.size, "z")[:, 0, :]
    mu1, mu0 = rows[labels].mean(axis=0), rows[~labels].mean(axis=0)
    diff = mu1 - mu0
    if not inverse_covariance:
        return diff
    if not 0 < shrinkage <= 1:
        raise ValueError(f"shrinkage must be in (0, 1], got {shrinkage!r}")
    centred = rows - np.where(labels[:, None], mu1, mu0)
    m, d = centred.shape
    a = shrinkage * float(np.einsum("ij,ij->", centred, centred)) / (m * d)  # s * trace(W) / d
    b = (1.0 - shrinkage) / m  # S = a I + b U^T U with U = centred
    if a <= 0:
        # Every row equals its class mean (e.g. the embeddings of one shared final token):
        # W = 0, and the isotropic limit of S^{-1} d is d's own direction.
        return diff
    if d <= m or b == 0:
        cov = b * (centred.T @ centred)
        cov[np.diag_indices(d)] += a
        return np.linalg.solve(cov, diff)
    # Woodbury: (a I + b U^T U)^{-1} v = (v - U^T (a/b I + U U^T)^{-1} U v) / a, an m x m solve
    # instead of d x d when the layer is wider than the training set.
    gram = centred @ centred.T
    gram[np.diag_indices(m)] += a / b
    return (diff - centred.T @ np.linalg.solve(gram, centred @ diff)) / a


def paired_items(y: ArrayLike, groups: ArrayLike) -> NDArray[np.intp]:
    """Pairs of a positive and a negative item of the same group.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (m,)
        Labels.
    groups : array-like, shape (m,)
        Group key per item (e.g. the statement whose honest and dishonest versions form a pair).

    Returns
    -------
    ndarray of intp, shape (p, 2)
        ``(positive, negative)`` item indices: within each group (in sorted key order) the k-th
        positive item is paired with the k-th negative item; unmatched items are left out.

    """
    labels = _validate.labels(y)
    codes, k = _validate.keys(groups, labels.size, "groups")
    pairs: list[tuple[int, int]] = []
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(k + 1))
    for g in range(k):
        members = order[bounds[g] : bounds[g + 1]]
        pos, neg = members[labels[members]], members[~labels[members]]
        pairs.extend(zip(pos.tolist(), neg.tolist(), strict=False))
    return np.asarray(pairs, dtype=np.intp).reshape(-1, 2)


def lat_direction(
    z: ArrayLike, y: ArrayLike, pairs: ArrayLike, *, seed: int = 0
) -> NDArray[np.float64]:
    """LAT (Zou et al.): first principal component of paired differences, sign from labels.

    Parameters
    ----------
    z : array-like of float, shape (m, d)
        Rows (standardised by the caller, if wanted).
    y : array-like of {0, 1} or bool, shape (m,)
        Labels with both classes (they fix the sign only).
    pairs : array-like of int, shape (p, 2)
        Item index pairs, p >= 2 (e.g. :func:`paired_items`).
    seed : int
        As in Zou et al., each difference is taken in a random order: pair ``k`` gives
        ``z[pairs[k, 1]] - z[pairs[k, 0]]`` where ``default_rng(seed).random(p)[k] < 0.5``, else
        ``z[pairs[k, 0]] - z[pairs[k, 1]]``. The differences are centred and the unit first
        principal component taken (SVD).

    Returns
    -------
    ndarray of float64, shape (d,)
        Unit vector oriented so that the positive items' mean projection exceeds the negatives'
        (zeros when all centred differences vanish).

    """
    labels = _validate.labels(y)
    _both_classes(labels)
    rows = _activations(z, labels.size, "z")[:, 0, :]
    idx = np.asarray(pairs, dtype=np.intp).reshape(-1, 2)
    if idx.shape[0] < 2:
        raise ValueError(f"LAT needs at least 2 pairs, got {idx.shape[0]}")
    if idx.min() < 0 or idx.max() >= labels.size:
        raise ValueError("pair indices out of range")
    flip = np.random.default_rng(_validate.seed_value(seed)).random(idx.shape[0]) < 0.5
    diffs = rows[idx[:, 0]] - rows[idx[:, 1]]
    diffs[flip] *= -1.0
    diffs -= diffs.mean(axis=0)
    _, sv, vt = np.linalg.svd(diffs, full_matrices=False)
    if sv[0] <= 0:
        # Equal differences (e.g. identical rows at a layer that sees one shared token): no
        # direction, so every item scores alike (AUROC 0.5) instead of failing a layer sweep.
        return np.zeros(rows.shape[1])
    direction = vt[0]
    proj = rows @ direction
    if proj[labels].mean() < proj[~labels].mean():
        direction = -direction
    return direction


# --- estimators ---------------------------------------------------------------------------------


class Estimator(Protocol):
    """Fits a probe on one layer column of training activations."""

    name: str
    level: ClassVar[str]

    def fit(
        self, x: ProbeInput, y: ArrayLike, groups: ArrayLike | None = None, *, layer_index: int = 0
    ) -> Probe:
        """Fit on the training items (x: (n, n_layers, d), (n, d) or TokenRows; y, groups: (n,))."""
        ...


def _labels_for(x: ProbeInput, y: ArrayLike) -> NDArray[np.bool_]:
    labels = _validate.labels(y)
    if labels.size != _n_items(x):
        raise ValueError(f"y has {labels.size} items but x has {_n_items(x)}")
    _both_classes(labels)
    return labels


def _groups_for(groups: ArrayLike | None, n: int) -> np.ndarray:
    # Without groups every item is its own group (no two items are known to belong together).
    return np.arange(n) if groups is None else np.asarray(groups)


def _calibrated(
    name: str,
    layer_index: int,
    mean: NDArray[np.float64],
    scale: NDArray[np.float64],
    z: NDArray[np.float64],
    labels: NDArray[np.bool_],
    direction: NDArray[np.float64],
    lam: float,
) -> DirectionProbe:
    """Platt-scale the projection ``z @ direction`` on the training rows."""
    one = fit_probe((z @ direction)[:, None], labels, layer_index=0, lam=lam)
    slope = float(one.coef[0] / one.scale[0])
    intercept = float(one.intercept - one.mean[0] * slope)
    return DirectionProbe(name, layer_index, mean, scale, direction, slope, intercept)


@dataclass(frozen=True)
class Logistic:
    """:mod:`app.stats.probes`' logistic regression; ``lam=None`` picks lambda by grouped CV."""

    lam: float | None = None
    lambdas: tuple[float, ...] = LAMBDAS
    folds: int = 5
    seed: int = 0
    name: str = "logistic"
    level: ClassVar[str] = "item"

    def fit(
        self, x: ProbeInput, y: ArrayLike, groups: ArrayLike | None = None, *, layer_index: int = 0
    ) -> LinearProbe:
        """Standardise on x's rows and fit; see :func:`app.stats.probes.fit_probe`."""
        labels = _labels_for(x, y)
        rows = _item_layer(x, layer_index)
        if self.lam is not None:
            probe = fit_probe(rows, labels, layer_index=0, lam=self.lam)
        else:
            g = _groups_for(groups, labels.size)
            probe, _ = select_then_refit(
                rows, labels, g, lambdas=self.lambdas, folds=self.folds, seed=self.seed
            )
        return replace(probe, layer_index=layer_index)


@dataclass(frozen=True)
class DiffMeans:
    """Mass-mean probe: the difference of the class means of the standardised rows.

    With ``inverse_covariance`` the direction is ``S^{-1} (mu_1 - mu_0)`` with ``S`` the shrunk
    within-class covariance (:func:`mass_mean_direction`).
    """

    inverse_covariance: bool = False
    shrinkage: float = DEFAULT_SHRINKAGE
    calibration_lam: float = CALIBRATION_LAMBDA
    name: str = "mass_mean"
    level: ClassVar[str] = "item"

    @_one_blas_thread
    def fit(
        self, x: ProbeInput, y: ArrayLike, groups: ArrayLike | None = None, *, layer_index: int = 0
    ) -> DirectionProbe:
        """Standardise on x's rows, take the direction, Platt-scale its projection."""
        labels = _labels_for(x, y)
        mean, scale, z = _standardise(_item_layer(x, layer_index))
        direction = mass_mean_direction(
            z, labels, inverse_covariance=self.inverse_covariance, shrinkage=self.shrinkage
        )
        return _calibrated(
            self.name, layer_index, mean, scale, z, labels, direction, self.calibration_lam
        )


@dataclass(frozen=True)
class LatPca:
    """LAT (Zou et al. RepE): first principal component of paired differences.

    Pairs come from the groups (:func:`paired_items`): a positive and a negative item of one
    group, e.g. the honest and the dishonest version of one statement. The rows are
    standardised on the training items before the differences are taken.
    """

    seed: int = 0
    calibration_lam: float = CALIBRATION_LAMBDA
    name: str = "lat"
    level: ClassVar[str] = "item"

    @_one_blas_thread
    def fit(
        self, x: ProbeInput, y: ArrayLike, groups: ArrayLike | None = None, *, layer_index: int = 0
    ) -> DirectionProbe:
        """Standardise, pair within groups, take the signed first PC, Platt-scale it."""
        labels = _labels_for(x, y)
        if groups is None:
            raise ValueError("LAT pairs items within groups: pass groups")
        mean, scale, z = _standardise(_item_layer(x, layer_index))
        direction = lat_direction(z, labels, paired_items(labels, groups), seed=self.seed)
        return _calibrated(
            self.name, layer_index, mean, scale, z, labels, direction, self.calibration_lam
        )


@dataclass(frozen=True)
class TokenLogistic:
    """Logistic regression on every token; an item's logit aggregates its tokens' logits.

    Each token carries its item's label and counts once in the loss (long items weigh more, as
    in Goldowsky-Dill et al.); the standardisation uses the training tokens only.
    """

    aggregation: Aggregation = "mean"
    lam: float = 1e-2
    name: str = "token_logistic"
    level: ClassVar[str] = "token"

    def fit(
        self, x: ProbeInput, y: ArrayLike, groups: ArrayLike | None = None, *, layer_index: int = 0
    ) -> TokenProbe:
        """Fit on the token rows of the training items."""
        labels = _labels_for(x, y)
        rows = x if isinstance(x, TokenRows) else TokenRows.of_items(x)
        token_y = labels[rows.item_of_token()]
        token = fit_probe(rows.values, token_y, layer_index=layer_index, lam=self.lam)
        return TokenProbe(token, self.aggregation)


ESTIMATORS: dict[str, Estimator] = {
    "logistic": Logistic(),
    "mass_mean": DiffMeans(),
    "mass_mean_iid": DiffMeans(inverse_covariance=True, name="mass_mean_iid"),
    "lat": LatPca(),
    "token_logistic_mean": TokenLogistic("mean", name="token_logistic_mean"),
    "token_logistic_max": TokenLogistic("max", name="token_logistic_max"),
}
"""The estimators recipes name, keyed by name (``estimator.name`` equals its key)."""


def get_estimator(name: str) -> Estimator:
    """The registered estimator ``name``; ValueError listing the names otherwise."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown estimator {name!r}; one of {', '.join(ESTIMATORS)}") from None


def decision_scores(probe: Probe, x: ProbeInput) -> NDArray[np.float64]:
    """Any probe's logit per item, shape (n,), on item activations or :class:`TokenRows`.

    A :class:`LinearProbe` reads items, so token rows must hold one token per item for it.
    """
    if isinstance(probe, LinearProbe) and isinstance(x, TokenRows):
        return probe.decision_function(_item_layer(x, probe.layer_index))
    return probe.decision_function(x)


# --- evaluation with one fold discipline --------------------------------------------------------


def _n_layers(x: ProbeInput) -> int:
    arr = x.values if isinstance(x, TokenRows) else np.asarray(x)
    return 1 if arr.ndim == 2 else int(arr.shape[1])


def estimator_layer_curves(
    estimator: Estimator,
    x_train: ProbeInput,
    y_train: ArrayLike,
    held_out: Sequence[tuple[ProbeInput, ArrayLike]],
    *,
    groups_train: ArrayLike | None = None,
) -> list[NDArray[np.float64]]:
    """AUROC on each held-out set of the estimator fitted on each layer of the training set.

    Parameters
    ----------
    estimator : Estimator
        E.g. ``ESTIMATORS["lat"]``.
    x_train : ndarray, shape (n_train, n_layers, d), or TokenRows
        Training activations.
    y_train : array-like of {0, 1}, shape (n_train,)
        Training labels with both classes.
    held_out : sequence of (x, y)
        Held-out sets in the training set's form, each ``y`` with both classes.
    groups_train : array-like, shape (n_train,), optional
        Groups of the training items (LAT pairs within them; logistic CV splits by them).

    Returns
    -------
    list of ndarray of float64, each shape (n_layers,)

    """
    n_layers = _n_layers(x_train)
    curves = [np.empty(n_layers) for _ in held_out]
    for layer in range(n_layers):
        probe = estimator.fit(x_train, y_train, groups_train, layer_index=layer)
        for curve, (x_k, y_k) in zip(curves, held_out, strict=True):
            curve[layer] = roc_auc_score(_validate.labels(y_k), decision_scores(probe, x_k))
    return curves


@dataclass(frozen=True, eq=False)
class CrossValScores:
    """Out-of-fold logits: ``logit`` (n,) predicted by the fold ``fold`` (n,) left out."""

    logit: np.ndarray
    fold: np.ndarray
    splits: list[Split]


def cross_val_scores(
    estimator: Estimator,
    x: ProbeInput,
    y: ArrayLike,
    groups: ArrayLike,
    *,
    layer_index: int,
    folds: int = 5,
    seed: int = 0,
) -> CrossValScores:
    """Grouped K-fold out-of-fold logits of an estimator at one layer.

    Parameters
    ----------
    estimator : Estimator
        Any registered estimator.
    x : ndarray, shape (n, n_layers, d), or TokenRows
        Activations.
    y : array-like of {0, 1}, shape (n,)
        Labels with both classes.
    groups : array-like, shape (n,)
        Group per item; no group straddles a fold (:func:`app.stats.cv_splits.grouped_folds`).
    layer_index : int
        Layer column.
    folds, seed : int
        Number and seed of the folds.

    Returns
    -------
    CrossValScores
        One held-out logit per item; standardisation and fit see the training folds only.

    """
    labels = _labels_for(x, y)
    g = np.asarray(groups)
    splits = grouped_folds(labels, g, folds, seed)
    logit = np.full(labels.size, np.nan)
    fold = np.full(labels.size, -1, dtype=np.intp)
    for k, (train, test) in enumerate(splits):
        probe = estimator.fit(_take(x, train), labels[train], g[train], layer_index=layer_index)
        logit[test] = decision_scores(probe, _take(x, test))
        fold[test] = k
    return CrossValScores(cast(np.ndarray, logit), fold, splits)
