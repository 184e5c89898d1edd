"""Win rates and Bradley-Terry strengths of the models behind a judge's pairwise verdicts.

Each verdict is one game between the two response models of a pair: a win, a loss or a tie
(a tie counts half a win for each side, as Chatbot Arena's and FastChat's tables count it).
Strengths follow Bradley and Terry's model ``P(i beats j) = p_i / (p_i + p_j)``, fitted by
Newton's method on the log-likelihood, reported as ``log p`` centred to mean 0.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["bradley_terry", "game_matrix", "win_rates"]

# A pseudo-game of each model against every other, half won: keeps a model that won (or
# lost) every game finite and leaves the ordering of the others as the data give it.
_PRIOR_GAMES = 0.1
_MAX_ITER = 100
_TOL = 1e-12


def game_matrix(
    first: ArrayLike,
    second: ArrayLike,
    outcome: ArrayLike,
    m: int,
    weights: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """Wins of each model over each other one, ties split in half.

    Parameters
    ----------
    first, second : array-like of int, shape (g,)
        Model indices of the two sides of each game (``first != second``).
    outcome : array-like of float, shape (g,)
        1 when ``first`` won, 0 when ``second`` won, 0.5 for a tie.
    m : int
        Number of models.
    weights : array-like of float, shape (g,), optional
        How many times each game counts (a bootstrap's multiplicities); 1 each by default.

    Returns
    -------
    numpy.ndarray of float, shape (m, m)
        ``w[i, j]``: games ``i`` won against ``j`` (halves for ties); the diagonal is 0.

    """
    a = np.asarray(first, dtype=np.intp)
    b = np.asarray(second, dtype=np.intp)
    y = np.asarray(outcome, dtype=np.float64)
    if not (a.shape == b.shape == y.shape) or a.ndim != 1:
        raise ValueError("first, second and outcome must have the same shape (g,)")
    if (a == b).any():
        raise ValueError("a model cannot play itself")
    n = np.ones_like(y) if weights is None else np.asarray(weights, dtype=np.float64)
    w = np.zeros((m, m))
    np.add.at(w, (a, b), y * n)
    np.add.at(w, (b, a), (1.0 - y) * n)
    return w


def win_rates(w: ArrayLike) -> NDArray[np.float64]:
    """Each model's share of its games won, shape (m,) (NaN for a model with no game)."""
    wins = np.asarray(w, dtype=np.float64)
    games = wins.sum(axis=1) + wins.sum(axis=0)
    out = np.full(wins.shape[0], np.nan)
    np.divide(wins.sum(axis=1), games, out=out, where=games > 0)
    return out


def bradley_terry(w: ArrayLike) -> NDArray[np.float64]:
    """Bradley-Terry log-strengths from a game matrix, centred to mean 0.

    Parameters
    ----------
    w : array-like of float, shape (m, m)
        Wins of row over column (:func:`game_matrix`).

    Returns
    -------
    numpy.ndarray of float, shape (m,)
        ``log p_i - mean(log p)``; ``P(i beats j) = 1 / (1 + exp(s_j - s_i))``. A model with
        no game gets NaN.

    """
    wins = np.asarray(w, dtype=np.float64)
    m = wins.shape[0]
    if wins.shape != (m, m):
        raise ValueError(f"w must be square, got shape {wins.shape}")
    played = (wins.sum(axis=1) + wins.sum(axis=0)) > 0
    out = np.full(m, np.nan)
    idx = np.flatnonzero(played)
    if idx.size == 0:
        return out
    sub = wins[np.ix_(idx, idx)] + _PRIOR_GAMES / 2 * (1 - np.eye(idx.size))
    games = sub + sub.T
    won = sub.sum(axis=1)
    x = np.zeros(idx.size)
    for _ in range(_MAX_ITER):
        # Newton's step on the log-likelihood sum_ij w_ij log sigma(x_i - x_j): quadratic
        # convergence in a few steps (Hunter's MM iteration needs hundreds, once per resample).
        p = 1.0 / (1.0 + np.exp(x[None, :] - x[:, None]))
        grad = won - (games * p).sum(axis=1)
        curv = games * p * (1.0 - p)
        hess = np.diag(curv.sum(axis=1)) - curv
        # The likelihood is flat along adding a constant to every x: least squares takes the
        # step orthogonal to it.
        step = np.linalg.lstsq(hess, grad, rcond=None)[0]
        x += step - step.mean()
        if np.max(np.abs(step)) < _TOL:
            break
    out[idx] = x - x.mean()
    return out
