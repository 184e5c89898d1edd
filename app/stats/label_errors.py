"""Label-error rankers from a matrix of many models' answers: higher score = more suspect label.

The answers of ``m`` models to ``n`` items are coded as option indices (``-1`` = no answer,
``-2`` = an answer naming no option); each item's label is an option index. Rankers:

- :func:`consensus_scores`: the fraction of answering models that did not give the label.
- :func:`weighted_consensus_scores`: 1 - the posterior probability of the label after
  CROWDLAB (``cleanlab.multiannotator``) weights each model by its estimated reliability.
- :func:`cleanlab_scores`: 1 - cleanlab's label quality (``cleanlab.rank``) of the label under
  out-of-sample class probabilities (the models' vote distribution, or a local model's option
  probabilities).
- :func:`combine_rankers`: a logistic regression over ranker features, trained against expert
  annotations by nested grouped cross-validation; out-of-fold scores only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from app.stats.probes import NestedCVResult, nested_cv

__all__ = [
    "NO_ANSWER",
    "OFF_OPTIONS",
    "RankerFeatures",
    "cleanlab_scores",
    "combine_rankers",
    "consensus_scores",
    "ranker_features",
    "vote_counts",
    "vote_distribution",
    "weighted_consensus_scores",
]

NO_ANSWER = -1
"""Code of a missing answer (the model did not answer the item)."""
OFF_OPTIONS = -2
"""Code of an answer that names no option (e.g. an unparsed output); it is a wrong answer."""
# Additive smoothing of vote distributions, so that no class has probability 0.
_SMOOTHING = 0.5


def _matrix(answers: ArrayLike, labels: ArrayLike, n_classes: int) -> tuple[NDArray, NDArray]:
    a = np.asarray(answers)
    y = np.asarray(labels)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"answers must have shape (n, m) with n, m >= 1, got {a.shape}")
    if y.shape != (a.shape[0],):
        raise ValueError(f"labels must have shape ({a.shape[0]},), got {y.shape}")
    if n_classes < 2:
        raise ValueError(f"n_classes must be >= 2, got {n_classes}")
    a = a.astype(np.int64, copy=False)
    y = y.astype(np.int64, copy=False)
    if ((a < OFF_OPTIONS) | (a >= n_classes)).any():
        raise ValueError(f"answers must be option indices 0..{n_classes - 1}, -1 or -2")
    if ((y < 0) | (y >= n_classes)).any():
        raise ValueError(f"labels must be option indices 0..{n_classes - 1}")
    return a, y


def vote_counts(answers: ArrayLike, n_classes: int) -> NDArray[np.int64]:
    """How many models chose each option, and how many answered off the options.

    Parameters
    ----------
    answers : array-like of int, shape (n, m)
        Coded answers (see the module docstring).
    n_classes : int
        Number of options K.

    Returns
    -------
    ndarray of int64, shape (n, K + 1)
        Column k counts option k; the last column counts answers naming no option.

    """
    a = np.asarray(answers, dtype=np.int64)
    out = np.zeros((a.shape[0], n_classes + 1), dtype=np.int64)
    for k in range(n_classes):
        out[:, k] = (a == k).sum(axis=1)
    out[:, n_classes] = (a == OFF_OPTIONS).sum(axis=1)
    return out


def vote_distribution(answers: ArrayLike, n_classes: int) -> NDArray[np.float64]:
    """The models' answers as class probabilities, smoothed so that none is 0.

    Parameters
    ----------
    answers : array-like of int, shape (n, m)
        Coded answers; off-option answers and missing ones carry no vote.
    n_classes : int
        Number of options K.

    Returns
    -------
    ndarray of float64, shape (n, K)
        ``(votes_k + 0.5) / (votes + 0.5 K)``; rows sum to 1.

    """
    votes = vote_counts(answers, n_classes)[:, :n_classes].astype(np.float64) + _SMOOTHING
    return votes / votes.sum(axis=1, keepdims=True)


def consensus_scores(answers: ArrayLike, labels: ArrayLike, n_classes: int) -> NDArray[np.float64]:
    """The fraction of answering models whose answer is not the label.

    Parameters
    ----------
    answers : array-like of int, shape (n, m)
        Coded answers; an off-option answer counts as not the label, a missing one not at all.
    labels : array-like of int, shape (n,)
        The label's option index per item.
    n_classes : int
        Number of options K.

    Returns
    -------
    ndarray of float64, shape (n,)
        In [0, 1]; NaN for an item no model answered.

    """
    a, y = _matrix(answers, labels, n_classes)
    answered = (a != NO_ANSWER).sum(axis=1)
    agree = (a == y[:, None]).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(answered > 0, 1.0 - agree / np.maximum(answered, 1), np.nan)


def weighted_consensus_scores(
    answers: ArrayLike,
    labels: ArrayLike,
    n_classes: int,
    pred_probs: ArrayLike | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """1 - P(label) after weighting each model by its reliability (CROWDLAB, cleanlab).

    ``cleanlab.multiannotator.get_label_quality_multiannotator`` treats the models as
    annotators and estimates a weight per annotator (agreement with the others, adjusted for
    chance) and one for ``pred_probs``; the posterior of class k is cleanlab's weighted average
    of ``pred_probs[:, k]`` and each answering annotator's vote for k (with the estimated
    probability that an annotator gives the consensus label), and the score is one minus the
    posterior of the item's label.

    Parameters
    ----------
    answers : array-like of int, shape (n, m)
        Coded answers; off-option answers count as no vote here.
    labels : array-like of int, shape (n,)
        The label's option index per item.
    n_classes : int
        Number of options K.
    pred_probs : array-like of float, shape (n, K), optional
        Out-of-sample class probabilities; default the smoothed vote distribution.

    Returns
    -------
    (scores, weights)
        ``scores`` of shape (n,) in [0, 1], and the models' weights, shape (m,).

    """
    from cleanlab.multiannotator import get_label_quality_multiannotator

    a, y = _matrix(answers, labels, n_classes)
    votes = np.where(a >= 0, a, np.nan).astype(np.float64)
    keep = ~np.isnan(votes).all(axis=0)  # cleanlab refuses an annotator with no labels
    votes = votes[:, keep]
    probs = vote_distribution(a, n_classes) if pred_probs is None else np.asarray(pred_probs)
    info = get_label_quality_multiannotator(
        votes,
        probs,
        return_detailed_quality=False,
        return_annotator_stats=False,
        return_weights=True,
        verbose=False,
    )
    quality = info["label_quality"]
    counts = quality["num_annotations"].to_numpy()
    agreement = quality["annotator_agreement"].to_numpy()
    # cleanlab's own weighted average (crowdlab): an annotator gives the consensus label with
    # the mean agreement of multiply-annotated items, any other label with the rest, split.
    likely = float(np.mean(agreement[counts != 1]))
    unlikely = (1.0 - likely) / (n_classes - 1)
    model_w = float(info["model_weight"])
    annot_w = np.asarray(info["annotator_weight"], dtype=np.float64)
    answered = ~np.isnan(votes)
    total = model_w + answered.astype(np.float64) @ annot_w
    vote_for_label = answered & (votes == y[:, None])
    posterior = (
        model_w * probs[np.arange(len(y)), y]
        + (vote_for_label * likely + (answered & ~vote_for_label) * unlikely) @ annot_w
    ) / total
    weights = np.zeros(a.shape[1])
    weights[keep] = annot_w
    return 1.0 - posterior, weights


def cleanlab_scores(labels: ArrayLike, pred_probs: ArrayLike) -> NDArray[np.float64]:
    """1 - cleanlab's normalized-margin label quality of each label.

    Parameters
    ----------
    labels : array-like of int, shape (n,)
        The label's option index per item.
    pred_probs : array-like of float, shape (n, K)
        Out-of-sample class probabilities (rows sum to 1).

    Returns
    -------
    ndarray of float64, shape (n,)
        In [0, 1]: ``1 - (p_label - max_{k != label} p_k + 1) / 2``.

    """
    from cleanlab.rank import get_label_quality_scores

    probs = np.asarray(pred_probs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    quality = get_label_quality_scores(y, probs, method="normalized_margin")
    return 1.0 - np.asarray(quality, dtype=np.float64)


@dataclass(frozen=True)
class RankerFeatures:
    """The combiner's inputs: one column per feature, named."""

    names: tuple[str, ...]
    values: NDArray[np.float64]


def ranker_features(
    answers: ArrayLike,
    labels: ArrayLike,
    n_classes: int,
    *,
    weighted: ArrayLike,
    cleanlab: ArrayLike,
    local_probs: ArrayLike | None = None,
) -> RankerFeatures:
    """Per-item features of the learned combiner.

    Parameters
    ----------
    answers : array-like of int, shape (n, m)
        Coded answers.
    labels : array-like of int, shape (n,)
        Label option indices.
    n_classes : int
        Number of options K.
    weighted, cleanlab : array-like of float, shape (n,)
        The weighted-consensus and cleanlab scores.
    local_probs : array-like of float, shape (n, K), optional
        A local model's option probabilities (adds its probability of the label and its
        margin between its top option and the label).

    Returns
    -------
    RankerFeatures
        Columns: disagreement (the consensus score), plurality margin (share of the top option
        minus the share of the label), top-two margin, answer entropy (bits, off-option answers
        as one more outcome), weighted consensus, cleanlab, and the local model's two columns.

    """
    a, y = _matrix(answers, labels, n_classes)
    counts = vote_counts(a, n_classes).astype(np.float64)
    answered = np.maximum(counts.sum(axis=1), 1.0)
    shares = counts / answered[:, None]
    options = np.sort(shares[:, :n_classes], axis=1)
    rows = np.arange(len(y))
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.nansum(np.where(shares > 0, shares * np.log2(shares), 0.0), axis=1)
    columns = {
        "disagreement": consensus_scores(a, y, n_classes),
        "plurality_margin": options[:, -1] - shares[rows, y],
        "top_two_margin": options[:, -1] - options[:, -2],
        "entropy": entropy,
        "weighted_consensus": np.asarray(weighted, dtype=np.float64),
        "cleanlab": np.asarray(cleanlab, dtype=np.float64),
    }
    if local_probs is not None:
        probs = np.asarray(local_probs, dtype=np.float64)
        columns["local_p_label"] = probs[rows, y]
        columns["local_margin"] = probs.max(axis=1) - probs[rows, y]
    values = np.column_stack([np.nan_to_num(c, nan=0.0) for c in columns.values()])
    return RankerFeatures(tuple(columns), values)


def combine_rankers(
    features: RankerFeatures,
    y: ArrayLike,
    groups: ArrayLike,
    *,
    seed: int = 0,
    outer: int = 5,
    inner: int = 3,
    lambdas: Sequence[float] = (1e-4, 1e-3, 1e-2, 0.1, 1.0),
) -> NestedCVResult:
    """Out-of-fold scores of a logistic regression over ranker features.

    Nested grouped cross-validation (:func:`app.stats.probes.nested_cv`, the probes' own code:
    standardisation and L2 strength chosen inside each training part), so no group (e.g. a
    subject) is on both sides of any split and every score is held out.

    Parameters
    ----------
    features : RankerFeatures
        Matrix of shape (n, f).
    y : array-like of {0, 1}, shape (n,)
        Expert verdicts (1 = the label is wrong).
    groups : array-like, shape (n,)
        Group per item.
    seed, outer, inner, lambdas
        As for :func:`~app.stats.probes.nested_cv`.

    Returns
    -------
    NestedCVResult
        ``oof`` of shape (n,) is the combined ranker's score.

    """
    return nested_cv(
        features.values, y, groups, lambdas=lambdas, outer=outer, inner=inner, seed=seed
    )
