"""Bradley-Terry strengths against an independent maximisation of the same likelihood."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from app.stats.bradley_terry import _PRIOR_GAMES, bradley_terry, game_matrix, win_rates


def _reference(w: np.ndarray) -> np.ndarray:
    """Maximise sum_ij w_ij log sigma(x_i - x_j) with scipy (x_0 fixed at 0), then centre."""
    m = w.shape[0]
    prior = w + _PRIOR_GAMES / 2 * (1 - np.eye(m))

    def nll(free: np.ndarray) -> float:
        x = np.concatenate([[0.0], free])
        diff = x[:, None] - x[None, :]
        return float((prior * np.logaddexp(0.0, -diff)).sum())

    found = minimize(nll, np.zeros(m - 1), method="BFGS", options={"gtol": 1e-12})
    x = np.concatenate([[0.0], found.x])
    return x - x.mean()


def test_strengths_equal_a_direct_maximisation_and_win_rates_a_count() -> None:
    rng = np.random.default_rng(5)
    true = np.array([1.0, 0.4, 0.0, -0.7, -1.2])
    first = rng.integers(0, 5, 400)
    second = (first + rng.integers(1, 5, 400)) % 5
    p_first = 1 / (1 + np.exp(true[second] - true[first]))
    outcome = np.where(rng.random(400) < 0.1, 0.5, (rng.random(400) < p_first).astype(float))
    w = game_matrix(first, second, outcome, 5)
    assert w.sum() == 400 and np.all(np.diag(w) == 0)
    np.testing.assert_allclose(bradley_terry(w), _reference(w), atol=1e-6)
    for k in range(5):
        mine = np.concatenate([outcome[first == k], 1 - outcome[second == k]])
        assert win_rates(w)[k] == pytest.approx(mine.mean(), abs=1e-12)
    # Weights count games that many times (a bootstrap's multiplicities).
    twice = game_matrix(first, second, outcome, 5, np.full(400, 2.0))
    np.testing.assert_allclose(twice, 2 * w)


def test_a_model_that_always_wins_stays_finite_and_one_without_games_is_nan() -> None:
    w = game_matrix([0, 0, 1], [1, 2, 2], [1.0, 1.0, 0.5], 4)
    s = bradley_terry(w)
    assert np.isfinite(s[:3]).all() and np.isnan(s[3]) and s[0] == max(s[:3])
    np.testing.assert_allclose(s[:3], _reference(w[:3, :3]), atol=1e-6)
    with pytest.raises(ValueError, match="cannot play itself"):
        game_matrix([1], [1], [1.0], 2)
