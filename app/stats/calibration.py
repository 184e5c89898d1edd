"""Plot data for the metrics page: ROC and precision-recall curves, reliability bins, histograms.

Every function returns plain Python lists and dicts (no NaN, no infinity) so the result can go
straight into JSON for a browser-side chart.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.metrics import precision_recall_curve, roc_curve

from app.stats import _kernels, _validate

__all__ = [
    "pr_curve_arrays",
    "pr_curve_points",
    "reliability_bins",
    "roc_curve_arrays",
    "roc_curve_points",
    "score_histograms",
]


def _finite_or_none(values: np.ndarray) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in values.tolist()]


def roc_curve_points(y: ArrayLike, p: ArrayLike) -> dict[str, list[Any]] | None:
    """ROC curve points, as ``sklearn.metrics.roc_curve`` gives them.

    Collinear intermediate points are dropped (scikit-learn's ``drop_intermediate=True``); the
    curve still runs from (0, 0) to (1, 1).

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.
    p : array-like of float, shape (n,)
        Scores.

    Returns
    -------
    dict or None
        ``{"fpr": [...], "tpr": [...], "thresholds": [...]}``, lists of equal length m, with
        thresholds decreasing; the first threshold (scikit-learn's ``inf``, "predict nothing
        positive") is ``None``. ``None`` when ``y`` holds one class (the curve is undefined).

    Raises
    ------
    ValueError
        On invalid inputs (see ``app.stats.metrics.auroc``).

    """
    arrays = roc_curve_arrays(y, p)
    if arrays is None:
        return None
    fpr, tpr, thresholds = arrays
    return {"fpr": fpr.tolist(), "tpr": tpr.tolist(), "thresholds": _finite_or_none(thresholds)}


def roc_curve_arrays(y: ArrayLike, p: ArrayLike) -> tuple[NDArray, NDArray, NDArray] | None:
    """:func:`roc_curve_points` as arrays ``(fpr, tpr, thresholds)``, the first threshold ``inf``.

    What a plot reads: a curve of a million distinct scores is thinned from these, never
    turned into a million Python floats first.
    """
    labels, scores = _validate.labelled_scores(y, p)
    if labels.all() or not labels.any():
        return None
    fpr, tpr, thresholds = roc_curve(labels, scores)
    return fpr, tpr, thresholds


def pr_curve_points(y: ArrayLike, p: ArrayLike) -> dict[str, list[float]] | None:
    """Precision-recall curve points, as ``sklearn.metrics.precision_recall_curve`` gives them.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.
    p : array-like of float, shape (n,)
        Scores.

    Returns
    -------
    dict or None
        ``{"precision": [...], "recall": [...], "thresholds": [...]}``: precision and recall
        have m + 1 entries for m increasing thresholds, the last entry being the (recall 0,
        precision 1) end point scikit-learn appends. ``None`` when there is no positive label.

    Raises
    ------
    ValueError
        On invalid inputs.

    """
    arrays = pr_curve_arrays(y, p)
    if arrays is None:
        return None
    precision, recall, thresholds = arrays
    return {
        "precision": precision.tolist(),
        "recall": recall.tolist(),
        "thresholds": thresholds.tolist(),
    }


def pr_curve_arrays(y: ArrayLike, p: ArrayLike) -> tuple[NDArray, NDArray, NDArray] | None:
    """:func:`pr_curve_points` as arrays ``(precision, recall, thresholds)``."""
    labels, scores = _validate.labelled_scores(y, p)
    if not labels.any():
        return None
    precision, recall, thresholds = precision_recall_curve(labels, scores)
    return precision, recall, thresholds


def reliability_bins(y: ArrayLike, p: ArrayLike, n_bins: int = 10) -> list[dict[str, Any]]:
    """Reliability-diagram bins: equal-width probability bins with predicted vs observed rates.

    Bin k covers ``[k / n_bins, (k + 1) / n_bins)``; the last bin also holds ``p == 1``.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.
    p : array-like of float, shape (n,)
        Predicted probabilities, in [0, 1].
    n_bins : int
        Number of bins (at least 1).

    Returns
    -------
    list of dict, length n_bins
        Each ``{"lower", "upper", "count", "mean_predicted", "observed"}``; the two rates are
        ``None`` for an empty bin.

    Raises
    ------
    ValueError
        On invalid inputs, ``p`` outside [0, 1], or ``n_bins < 1``.

    """
    labels = _validate.labels(y)
    probs = _validate.probabilities(p, labels.size)
    if isinstance(n_bins, bool) or int(n_bins) != n_bins or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    n_bins = int(n_bins)
    index, edges = _kernels.equal_width_bins(probs, n_bins)
    counts = np.bincount(index, minlength=n_bins)
    predicted = np.bincount(index, weights=probs, minlength=n_bins)
    observed = np.bincount(index, weights=labels.astype(np.float64), minlength=n_bins)
    bins: list[dict[str, Any]] = []
    for k in range(n_bins):
        count = int(counts[k])
        bins.append(
            {
                "lower": float(edges[k]),
                "upper": float(edges[k + 1]),
                "count": count,
                "mean_predicted": float(predicted[k] / count) if count else None,
                "observed": float(observed[k] / count) if count else None,
            }
        )
    return bins


def _spread(low: float, high: float, bins: int) -> tuple[float, float]:
    """A range at least wide enough for ``bins`` distinct, increasing edges around [low, high].

    numpy widens an empty range by 0.5 on each side, which is below the spacing of floats
    from about 1e16 on (equal scores there made every plot fail): widen relative to the
    magnitude instead, and stay finite near the largest floats.
    """
    magnitude = max(abs(low), abs(high), 1.0)
    least = magnitude * 1e-9 * bins
    if high - low >= least:
        return low, high
    middle = low / 2 + high / 2
    low, high = middle - least / 2, middle + least / 2
    if not (math.isfinite(low) and math.isfinite(high)):
        top = float(np.finfo(np.float64).max)
        low, high = (
            (top - top * 1e-9 * bins, top) if middle > 0 else (-top, -top + top * 1e-9 * bins)
        )
    return low, high


def score_histograms(
    y: ArrayLike,
    p: ArrayLike,
    bins: int = 20,
    value_range: tuple[float, float] | None = None,
) -> dict[str, list[float] | list[int]]:
    """Histograms of scores split by label, on shared bin edges.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.
    p : array-like of float, shape (n,)
        Scores.
    bins : int
        Number of equal-width bins (at least 1).
    value_range : (float, float), optional
        Range of the edges; default [0, 1] when every score lies there, else the score range.

    Returns
    -------
    dict
        ``{"edges": [...] (bins + 1), "positive": [...] (bins), "negative": [...] (bins)}``
        with integer counts.

    Raises
    ------
    ValueError
        On invalid inputs, ``bins < 1``, or an invalid range.

    """
    labels, scores = _validate.labelled_scores(y, p)
    if isinstance(bins, bool) or int(bins) != bins or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    if value_range is None:
        value_range = (
            (0.0, 1.0)
            if _validate.is_probability(scores)
            else (float(scores.min()), float(scores.max()))
        )
    low, high = (float(v) for v in value_range)
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(f"value_range must be finite with low <= high, got {value_range!r}")
    low, high = _spread(low, high, int(bins))
    edges = np.histogram_bin_edges(scores, bins=int(bins), range=(low, high))
    positive, _ = np.histogram(scores[labels], bins=edges)
    negative, _ = np.histogram(scores[~labels], bins=edges)
    return {"edges": edges.tolist(), "positive": positive.tolist(), "negative": negative.tolist()}
