"""Precision and recall at k: the bootstrap kernel against a plain loop, ties shared at the cut."""

from __future__ import annotations

import numpy as np
import pytest

from app.stats.bootstrap import group_bootstrap, group_multiplicities


def expected_hits(y: np.ndarray, w: np.ndarray, p: np.ndarray, k: int) -> float:
    """Weighted positives among the top k, a tie group at the cut counted by its share."""
    taken = hits = 0.0
    for score in np.unique(p)[::-1]:
        tied = p == score
        weight, positives = w[tied].sum(), (w[tied] * y[tied]).sum()
        if taken + weight >= k:
            return hits + (k - taken) * positives / weight
        taken, hits = taken + weight, hits + positives
    return np.nan


@pytest.mark.parametrize("rounding", [2, 6])
def test_topk_point_and_replicates_equal_a_plain_loop(rounding: int) -> None:
    rng = np.random.default_rng(rounding)
    n, n_groups = 1500, 400
    # Every group present, so the bootstrap's unit codes are these codes.
    codes = np.r_[np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)]
    y = rng.random(n) < 0.08
    p = np.round(rng.random(n) * 0.8 + 0.25 * y, rounding)  # coarse rounding: many ties
    metrics = ["precision_at_50", "precision_at_200", "recall_at_100"]
    result = group_bootstrap(y, p, codes, metrics=metrics, resamples=40, seed=9)
    ones = np.ones(n)
    assert result.point["precision_at_50"][0] == pytest.approx(
        expected_hits(y, ones, p, 50) / 50, abs=1e-12
    )
    assert result.point["recall_at_100"][0] == pytest.approx(
        expected_hits(y, ones, p, 100) / y.sum(), abs=1e-12
    )
    weights = group_multiplicities(n_groups, 40, 9)
    for b in (0, 17, 39):
        w = weights[b][codes].astype(float)
        assert result.replicates["precision_at_200"][0][b] == pytest.approx(
            expected_hits(y, w, p, 200) / 200, abs=1e-12
        )
        assert result.replicates["recall_at_100"][0][b] == pytest.approx(
            expected_hits(y, w, p, 100) / (w * y).sum(), abs=1e-12
        )


def test_topk_reaches_past_the_prefix_and_is_undefined_beyond_the_items() -> None:
    # Ten items of weight one: asking for the top 50 of a sample is undefined, not a guess.
    y = np.array([1, 0] * 5, dtype=bool)
    p = np.linspace(0, 1, 10)
    result = group_bootstrap(y, p, np.arange(10), metrics=["precision_at_50"], resamples=5)
    assert np.isnan(result.point["precision_at_50"][0])
    # One huge tie at the top: the crossing group is shared, whatever the prefix length.
    n = 1000
    y = np.arange(n) % 4 == 0
    p = np.where(np.arange(n) < 900, 1.0, 0.0)
    result = group_bootstrap(y, p, np.arange(n), metrics=["precision_at_200"], resamples=0)
    assert result.point["precision_at_200"][0] == pytest.approx(y[:900].mean())
