"""Crowd-style label-error rankers over many models' answers, hard or soft (pure numpy).

Each model's evidence on an item is a *soft vote*: its probability over the item's options where it
gave one (lm-evaluation-harness log-likelihoods, the local ``answer`` job), else the one-hot vector
of its chosen option; an answer naming no option is a vote for no option (a wrong answer), a
missing answer no vote at all. Every ranker here scores an item's label, higher = more suspect:

- :func:`soft_consensus`: 1 - the mean vote for the label (the consensus ranker, soft), with the
  strength of the plurality for one other option beside it for breaking ties (:func:`tie_break`).
- :func:`dawid_skene`: the posterior of the true option under Dawid & Skene's (1979) model, one
  confusion matrix per model, fitted by EM.
- :func:`one_coin`: the same with one accuracy per model (the "one-coin" model), fitted by EM.
- :func:`rasch`: item response (1PL): P(model j gives the label on item i) = sigmoid(ability_j -
  difficulty_i), an L2-penalised maximum-likelihood fit by Newton's method.
- :func:`ensemble_distribution`: the models' average probability vector (0.5 pseudo-votes per
  option), the class probabilities of cleanlab's label quality and of CROWDLAB.

Array shapes: ``n`` items, ``m`` models, ``K`` options (the most any item has).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from app.stats.label_errors import NO_ANSWER, OFF_OPTIONS

__all__ = [
    "TIE_STEP_CAP",
    "SoftVotes",
    "against_share",
    "dawid_skene",
    "ensemble_distribution",
    "hard_consensus",
    "one_coin",
    "option_mask",
    "rasch",
    "soft_consensus",
    "soft_votes",
    "tie_break",
]

TIE_STEP_CAP = 1e-3
"""The most a tie-break adds to a score (it reorders ties only)."""
# Pseudo-votes per option of the ensemble distribution (as label_errors.vote_distribution).
_SMOOTHING = 0.5


@dataclass(frozen=True)
class SoftVotes:
    """Every model's vote on every item.

    Attributes
    ----------
    votes : ndarray of float64, shape (n, m, K)
        Probability vector (or one-hot answer) of model j on item i; zeros where it gave no
        option or no answer.
    answered : ndarray of bool, shape (n, m)
        Whether model j answered item i (an off-option answer included).
    off : ndarray of bool, shape (n, m)
        Whether model j's answer named no option (a wrong answer, with no probabilities).

    """

    votes: NDArray[np.float64]
    answered: NDArray[np.bool_]
    off: NDArray[np.bool_]

    @property
    def n_answered(self) -> NDArray[np.float64]:
        """Models that answered each item, shape (n,)."""
        return self.answered.sum(axis=1).astype(np.float64)


def soft_votes(codes: ArrayLike, probs: ArrayLike | None, n_classes: int) -> SoftVotes:
    """The models' soft votes from their coded answers and, where given, option probabilities.

    Parameters
    ----------
    codes : array-like of int, shape (n, m)
        Option index per answer; -1 no answer, -2 an answer naming no option.
    probs : array-like of float, shape (n, m, K), optional
        Model j's probability of each option on item i; NaN where it gave none. A row with
        probabilities replaces the one-hot vote of the answer.
    n_classes : int
        K.

    Returns
    -------
    SoftVotes

    """
    a = np.asarray(codes, dtype=np.int64)
    if a.ndim != 2:
        raise ValueError(f"codes must have shape (n, m), got {a.shape}")
    if ((a < OFF_OPTIONS) | (a >= n_classes)).any():
        raise ValueError(f"codes must be option indices 0..{n_classes - 1}, -1 or -2")
    votes = (a[:, :, None] == np.arange(n_classes)).astype(np.float64)
    have = np.zeros(a.shape, dtype=bool)
    if probs is not None:
        p = np.asarray(probs, dtype=np.float64)
        if p.shape != (*a.shape, n_classes):
            raise ValueError(f"probs must have shape {(*a.shape, n_classes)}, got {p.shape}")
        have = np.isfinite(p).all(axis=2)
        votes[have] = p[have]
    answered = (a != NO_ANSWER) | have
    return SoftVotes(votes, answered, (a == OFF_OPTIONS) & ~have)


def option_mask(n_options: ArrayLike, n_classes: int) -> NDArray[np.bool_]:
    """Which of the K options each item has, shape (n, K) (an item with no options: all)."""
    k = np.asarray(n_options, dtype=np.int64)
    k = np.where(k > 0, np.minimum(k, n_classes), n_classes)
    return np.arange(n_classes)[None, :] < k[:, None]


def _rows(labels: ArrayLike, n: int, n_classes: int) -> NDArray[np.int64]:
    y = np.asarray(labels, dtype=np.int64)
    if y.shape != (n,) or ((y < 0) | (y >= n_classes)).any():
        raise ValueError(f"labels must be {n} option indices 0..{n_classes - 1}")
    return y


def soft_consensus(sv: SoftVotes, labels: ArrayLike) -> NDArray[np.float64]:
    """1 - the answering models' mean vote for the label.

    With hard answers only, the fraction of answering models that did not give the label
    (:func:`app.stats.label_errors.consensus_scores`).

    Parameters
    ----------
    sv : SoftVotes
        Votes of shape (n, m, K).
    labels : array-like of int, shape (n,)
        The label's option index per item.

    Returns
    -------
    ndarray of float64, shape (n,)
        In [0, 1]; NaN where no model answered.

    """
    n, _, k = sv.votes.shape
    y = _rows(labels, n, k)
    support = sv.votes[np.arange(n), :, y].sum(axis=1)
    answered = sv.n_answered
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(answered > 0, 1.0 - support / np.maximum(answered, 1.0), np.nan)


def against_share(sv: SoftVotes, labels: ArrayLike) -> NDArray[np.float64]:
    """The strength of the plurality for another option: its share of the answering models' votes.

    Parameters
    ----------
    sv : SoftVotes
        Votes of shape (n, m, K).
    labels : array-like of int, shape (n,)
        The label's option index per item.

    Returns
    -------
    ndarray of float64, shape (n,)
        ``max_{k != label} sum_j votes[i, j, k] / answered_i`` in [0, 1]; 0 where no model
        answered.

    """
    n, _, k = sv.votes.shape
    y = _rows(labels, n, k)
    totals = sv.votes.sum(axis=1)
    totals[np.arange(n), y] = -np.inf
    if k < 2:
        return np.zeros(n)
    answered = sv.n_answered
    return np.where(answered > 0, totals.max(axis=1) / np.maximum(answered, 1.0), 0.0)


def hard_consensus(
    codes: ArrayLike, labels: ArrayLike, n_classes: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:func:`soft_consensus` and :func:`against_share` of hard answers, in one pass over them.

    One ``bincount`` of (item, answer) pairs counts every option, the off-option answers and the
    missing ones at once (no soft votes built, no pass per option).

    Parameters
    ----------
    codes : array-like of int, shape (n, m)
        Coded answers (-1 none, -2 no option).
    labels : array-like of int, shape (n,)
        The label's option index per item.
    n_classes : int
        K.

    Returns
    -------
    (consensus, share)
        Shapes (n,) and (n,): the fraction of answering models against the label (NaN where
        none answered; :func:`app.stats.label_errors.consensus_scores`) and the share of them on
        the strongest other option (0 where none answered).

    """
    a = np.asarray(codes)
    n, m = a.shape
    y = _rows(labels, n, n_classes)
    width = n_classes + 2  # columns: no option (-2), missing (-1), then the K options
    index = a + (np.arange(n, dtype=np.int64) * width + 2)[:, None]
    counts = np.bincount(index.ravel(), minlength=n * width).reshape(n, width)
    answered = m - counts[:, 1]
    rows = np.arange(n)
    agree = counts[rows, y + 2]
    options = counts[:, 2:].copy()
    options[rows, y] = -1
    top = np.maximum(options.max(axis=1), 0) if n_classes > 1 else np.zeros(n, dtype=np.int64)
    safe = np.maximum(answered, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        consensus = np.where(answered > 0, 1.0 - agree / safe, np.nan)
    return consensus, np.where(answered > 0, top / safe, 0.0)


def tie_break(primary: ArrayLike, secondary: ArrayLike) -> NDArray[np.float64]:
    """``primary`` with its exact ties ordered by ``secondary`` (in [0, 1]), and nothing else moved.

    ``(primary + step * secondary) / (1 + step)`` where ``step`` is half the smallest gap between
    two distinct finite values of ``primary`` (at most :data:`TIE_STEP_CAP`): items with
    different primary scores keep their order, equal ones are ordered by ``secondary``, scores
    stay in [0, 1] (a probability stays one), and none moves by more than ``step``.

    Parameters
    ----------
    primary : array-like of float, shape (n,)
        Scores in [0, 1] (NaN stays NaN).
    secondary : array-like of float, shape (n,)
        Tie-break values in [0, 1] (NaN counts as 0).

    Returns
    -------
    ndarray of float64, shape (n,)

    """
    p = np.asarray(primary, dtype=np.float64)
    s = np.nan_to_num(np.clip(np.asarray(secondary, dtype=np.float64), 0.0, 1.0), nan=0.0)
    distinct = np.unique(p[np.isfinite(p)])
    gaps = np.diff(distinct)
    step = min(float(gaps.min()) / 2.0, TIE_STEP_CAP) if gaps.size else TIE_STEP_CAP
    return (p + step * s) / (1.0 + step)


def ensemble_distribution(sv: SoftVotes) -> NDArray[np.float64]:
    """The models' average probability vector, with 0.5 pseudo-votes per option.

    With hard answers only this is :func:`app.stats.label_errors.vote_distribution`.

    Returns
    -------
    ndarray of float64, shape (n, K)
        ``(sum_j votes[i, j] + 0.5) / (sum_jk votes[i, j, k] + 0.5 K)``; rows sum to 1.

    """
    totals = sv.votes.sum(axis=1) + _SMOOTHING
    return totals / totals.sum(axis=1, keepdims=True)


def _initial_posterior(sv: SoftVotes, mask: NDArray[np.bool_]) -> NDArray[np.float64]:
    """The (soft) majority vote as a starting posterior, uniform where no model voted."""
    totals = sv.votes.sum(axis=1) * mask
    none = totals.sum(axis=1) == 0
    totals[none] = mask[none]
    return totals / totals.sum(axis=1, keepdims=True)


def _normalise_log(log_post: NDArray[np.float64], mask: NDArray[np.bool_]) -> NDArray[np.float64]:
    log_post = np.where(mask, log_post, -np.inf)
    log_post -= log_post.max(axis=1, keepdims=True)
    post = np.exp(log_post)
    return post / post.sum(axis=1, keepdims=True)


def dawid_skene(
    sv: SoftVotes,
    n_options: ArrayLike,
    *,
    smoothing: float = 0.01,
    max_iter: int = 100,
    tol: float = 1e-7,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Posterior of each item's true option under the Dawid-Skene model, by EM.

    Model j answers ``r`` given true option ``c`` with probability ``pi[j, c, r]`` (``r`` one of
    the K options or "no option"); a soft vote counts as fractional answers. EM starts from the
    (soft) majority vote; the M-step adds ``smoothing`` pseudo-answers to every cell of every
    confusion matrix; options an item lacks have posterior 0.

    Parameters
    ----------
    sv : SoftVotes
        Votes of shape (n, m, K).
    n_options : array-like of int, shape (n,)
        Options per item.
    smoothing : float
        Pseudo-count per confusion-matrix cell.
    max_iter : int
        EM iterations at most.
    tol : float
        Stop when no posterior entry moved by more than this (0: run ``max_iter``).

    Returns
    -------
    (posterior, confusion)
        Shapes (n, K) (rows sum to 1) and (m, K, K + 1).

    """
    n, m, k = sv.votes.shape
    mask = option_mask(n_options, k)
    # Responses: the K options, then "no option" (an off-option answer).
    obs = np.concatenate([sv.votes, sv.off[:, :, None].astype(np.float64)], axis=2)
    flat = obs.reshape(n, m * (k + 1))
    post = _initial_posterior(sv, mask)
    confusion = np.empty((m, k, k + 1))
    for _ in range(max_iter):
        prior = post.mean(axis=0)
        counts = (post.T @ flat).reshape(k, m, k + 1).transpose(1, 0, 2) + smoothing
        confusion = counts / counts.sum(axis=2, keepdims=True)
        weights = np.log(confusion).transpose(0, 2, 1).reshape(m * (k + 1), k)
        with np.errstate(divide="ignore"):
            log_post = np.log(prior)[None, :] + flat @ weights
        new = _normalise_log(log_post, mask)
        moved = float(np.abs(new - post).max())
        post = new
        if moved <= tol:
            break
    return post, confusion


def one_coin(
    sv: SoftVotes,
    n_options: ArrayLike,
    *,
    pseudo: float = 1.0,
    max_iter: int = 100,
    tol: float = 1e-7,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Posterior of each item's true option when model j is right with probability ``acc_j``.

    A wrong answer is any other of the item's options with equal probability, or no option;
    the true option has a uniform prior over the item's options. EM from the (soft) majority
    vote; the M-step is ``acc_j = (expected right answers + pseudo) / (answers + 2 pseudo)``.

    Parameters
    ----------
    sv : SoftVotes
        Votes of shape (n, m, K).
    n_options : array-like of int, shape (n,)
        Options per item.
    pseudo : float
        Beta(1 + pseudo, 1 + pseudo) prior of each accuracy (its pseudo-counts).
    max_iter, tol
        As in :func:`dawid_skene`.

    Returns
    -------
    (posterior, accuracy)
        Shapes (n, K) and (m,).

    """
    _, m, k = sv.votes.shape
    mask = option_mask(n_options, k)
    wrong_ways = np.maximum(mask.sum(axis=1) - 1, 1).astype(np.float64)
    answers = sv.answered.sum(axis=0).astype(np.float64)
    mass = sv.votes.sum(axis=1)  # (n, K): the votes each option got
    post = _initial_posterior(sv, mask)
    accuracy = np.full(m, 0.5)
    for _ in range(max_iter):
        right = np.einsum("ijc,ic->j", sv.votes, post)
        accuracy = (right + pseudo) / (answers + 2.0 * pseudo)
        # log P(answers | true c) up to terms equal for every c: a vote for c weighs
        # logit(acc_j) + log(K_i - 1); every other vote and every off-option answer weigh the same
        # whatever c is.
        logit = np.log(accuracy) - np.log1p(-accuracy)
        log_post = np.einsum("ijc,j->ic", sv.votes, logit) + np.log(wrong_ways)[:, None] * mass
        new = _normalise_log(log_post, mask)
        moved = float(np.abs(new - post).max())
        post = new
        if moved <= tol:
            break
    return post, accuracy


def rasch(
    correct: ArrayLike,
    *,
    l2: float = 1.0,
    max_iter: int = 50,
    tol: float = 1e-10,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Abilities and difficulties of the item-response (1PL) model, L2-penalised, by Newton.

    ``P(model j gives the label on item i) = sigmoid(ability_j - difficulty_i)``; the fit
    minimises ``sum_observed [log(1 + e^z) - c z] + l2 / 2 (|ability|^2 + |difficulty|^2)`` with
    ``z = ability_j - difficulty_i`` (strictly convex: one optimum). Each Newton step solves the
    (m + n)-square system through its m x m Schur complement (the item block is diagonal).

    Parameters
    ----------
    correct : array-like of float, shape (n, m)
        1 where model j gave the label, 0 where it gave another answer, a fraction for a soft
        vote (its probability of the label), NaN where it did not answer.
    l2 : float
        Penalty strength (> 0).
    max_iter : int
        Newton steps at most.
    tol : float
        Stop when no parameter moved by more than this.

    Returns
    -------
    (ability, difficulty)
        Shapes (m,) and (n,).

    """
    c = np.asarray(correct, dtype=np.float64)
    if c.ndim != 2:
        raise ValueError(f"correct must have shape (n, m), got {c.shape}")
    if l2 <= 0:
        raise ValueError("l2 must be > 0")
    seen = ~np.isnan(c)
    target = np.where(seen, c, 0.0)
    n, m = c.shape
    ability, difficulty = np.zeros(m), np.zeros(n)
    for _ in range(max_iter):
        z = ability[None, :] - difficulty[:, None]
        p = 1.0 / (1.0 + np.exp(-z))
        resid = np.where(seen, p - target, 0.0)
        w = np.where(seen, p * (1.0 - p), 0.0)
        g_ability = resid.sum(axis=0) + l2 * ability
        g_difficulty = -resid.sum(axis=1) + l2 * difficulty
        d_ability = w.sum(axis=0) + l2
        d_difficulty = w.sum(axis=1) + l2
        # Hessian [[diag(d_ability), -W^T], [-W, diag(d_difficulty)]]: eliminate the items.
        schur = np.diag(d_ability) - w.T @ (w / d_difficulty[:, None])
        rhs = g_ability + w.T @ (g_difficulty / d_difficulty)
        step_ability = np.linalg.solve(schur, rhs)
        step_difficulty = (g_difficulty + w @ step_ability) / d_difficulty
        ability -= step_ability
        difficulty -= step_difficulty
        if max(np.abs(step_ability).max(), np.abs(step_difficulty).max()) <= tol:
            break
    return ability, difficulty
