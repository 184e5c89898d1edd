"""Point metrics of a detector against binary labels: prevalence, AUROC, AUPRC, Brier, accuracy.

A metric that is undefined on the given data (AUROC with one class, AUPRC with no positives,
choice-matched AUROC with no stratum holding both classes) is returned as ``None``, never as 0.5
or 0, so that callers and JSON outputs cannot mistake "no information" for "chance".
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from app.stats import _kernels, _validate

__all__ = [
    "accuracy",
    "auprc",
    "auroc",
    "brier",
    "choice_matched_auroc",
    "prevalence",
]


def _defined(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _unit_weights(n: int) -> np.ndarray:
    # One resample in which every item counts once: the kernels then give the plain metric,
    # and integer weights keep the concordance count exact.
    return np.ones((1, n), dtype=np.int64)


def _rank_metrics(y: ArrayLike, p: ArrayLike) -> tuple[float | None, float | None]:
    # AUROC and AUPRC come from one pass of the rank kernel over a single all-ones resample.
    labels, scores = _validate.labelled_scores(y, p)
    roc, pr = _kernels.weighted_rank_metrics(labels, scores, _unit_weights(labels.size))
    return _defined(roc[0]), _defined(pr[0])


def prevalence(y: ArrayLike) -> float:
    """Fraction of positive labels.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.

    Returns
    -------
    float
        ``mean(y)``.

    Raises
    ------
    ValueError
        If ``y`` is empty, not one-dimensional, or not binary.

    """
    labels = _validate.labels(y)
    return float(labels.mean())


def auroc(y: ArrayLike, p: ArrayLike) -> float | None:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties counted 1/2.

    Equals ``sklearn.metrics.roc_auc_score(y, p)`` (to rounding) where that is defined.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.
    p : array-like of float, shape (n,)
        Scores; any finite values, higher meaning "more likely positive".

    Returns
    -------
    float or None
        ``None`` when ``y`` holds only one class (the metric is undefined, not 0.5).

    Raises
    ------
    ValueError
        On empty, non-binary or non-finite inputs or unequal shapes.

    """
    return _rank_metrics(y, p)[0]


def auprc(y: ArrayLike, p: ArrayLike) -> float | None:
    """Area under the precision-recall curve as average precision.

    ``AP = sum_k (R_k - R_{k-1}) P_k`` over the distinct score thresholds, exactly as
    ``sklearn.metrics.average_precision_score`` defines it (tied scores form one threshold; no
    interpolation).

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.
    p : array-like of float, shape (n,)
        Scores; any finite values.

    Returns
    -------
    float or None
        ``None`` when there is no positive label (recall is undefined). With no negatives the
        value is 1.0, as scikit-learn gives.

    Raises
    ------
    ValueError
        On empty, non-binary or non-finite inputs or unequal shapes.

    """
    return _rank_metrics(y, p)[1]


def brier(y: ArrayLike, p: ArrayLike) -> float:
    """Brier score: mean squared difference between probability and label (lower is better).

    Equals ``sklearn.metrics.brier_score_loss(y, p)`` for binary labels.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.
    p : array-like of float, shape (n,)
        Predicted probabilities of the positive class, in [0, 1].

    Returns
    -------
    float

    Raises
    ------
    ValueError
        On empty, non-binary or non-finite inputs, unequal shapes, or ``p`` outside [0, 1].

    """
    labels = _validate.labels(y)
    probs = _validate.probabilities(p, labels.size)
    return float(np.mean((probs - labels) ** 2))


def accuracy(y: ArrayLike, p: ArrayLike, threshold: float = 0.5) -> float:
    """Fraction of items whose thresholded score equals the label.

    An item is predicted positive when ``p >= threshold``.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.
    p : array-like of float, shape (n,)
        Scores or probabilities.
    threshold : float
        Decision threshold (finite).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        On empty, non-binary or non-finite inputs, unequal shapes, or a non-finite threshold.

    """
    labels, scores = _validate.labelled_scores(y, p)
    cut = _threshold(threshold)
    return float(np.mean((scores >= cut) == labels))


def choice_matched_auroc(y: ArrayLike, p: ArrayLike, choice: ArrayLike) -> float | None:
    """AUROC counting only (positive, negative) pairs that share a stratum, pooled over strata.

    ``sum_s (concordant_s + 0.5 * tied_s) / sum_s (n_pos_s * n_neg_s)``. With ``choice`` the
    judge's AB choice this asks whether a detector ranks flips above non-flips *beyond* what the
    choice itself reveals.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels (e.g. flip / no flip).
    p : array-like of float, shape (n,)
        Scores.
    choice : array-like, shape (n,)
        Stratum of each item (any scalar keys, e.g. ``"A"`` / ``"B"``); no missing values.

    Returns
    -------
    float or None
        ``None`` when no stratum holds both classes.

    Raises
    ------
    ValueError
        On empty, non-binary or non-finite inputs, unequal shapes, or missing strata.

    """
    labels, scores = _validate.labelled_scores(y, p)
    strata, n_strata = _validate.keys(choice, labels.size, "choice")
    value = _kernels.weighted_choice_matched_auroc(
        labels, scores, strata, n_strata, _unit_weights(labels.size)
    )
    return _defined(value[0])


def _threshold(threshold: float) -> float:
    cut = float(threshold)
    if not math.isfinite(cut):
        raise ValueError(f"threshold must be finite, got {threshold!r}")
    return cut
