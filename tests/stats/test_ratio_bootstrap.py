"""Ratios of sums on group-bootstrap resamples: the resamples of bootstrap_mean, paired columns."""

from __future__ import annotations

import numpy as np
import pytest

from app.stats.bootstrap import bootstrap_mean, bootstrap_ratios, group_multiplicities


def test_a_ratio_over_ones_is_the_mean_on_the_same_resamples() -> None:
    rng = np.random.default_rng(3)
    x = (rng.random(200) < 0.3).astype(float)
    groups = rng.integers(0, 60, 200)
    ratio = bootstrap_ratios(x[:, None], np.ones((200, 1)), groups, resamples=300, seed=4)
    mean = bootstrap_mean(x, groups, resamples=300, seed=4)
    assert ratio.estimate(0) == mean


def test_replicates_are_sums_over_the_drawn_groups_and_differences_are_paired() -> None:
    rng = np.random.default_rng(8)
    num = rng.integers(0, 3, size=(90, 2)).astype(float)
    den = np.full((90, 2), 2.0)
    den[::7, 1] = 0.0  # items outside the second rate's subset
    groups = rng.integers(0, 25, 90)
    result = bootstrap_ratios(num, den, groups, resamples=50, seed=1)
    codes = np.unique(groups, return_inverse=True)[1]
    weights = group_multiplicities(int(codes.max()) + 1, 50, seed=1)[:, codes]  # (B, n)
    expected = (weights @ num) / (weights @ den)
    np.testing.assert_allclose(result.replicates.T, expected, rtol=1e-12)
    assert result.point.tolist() == pytest.approx((num.sum(0) / den.sum(0)).tolist())
    diff = result.difference(0, 1)
    low, high = np.percentile(expected[:, 0] - expected[:, 1], [2.5, 97.5])
    assert diff.ci == pytest.approx([low, high])


def test_bad_shapes_and_negative_denominators_are_refused() -> None:
    with pytest.raises(ValueError, match="share a shape"):
        bootstrap_ratios(np.ones((3, 2)), np.ones((3, 1)), [0, 1, 2])
    with pytest.raises(ValueError, match="non-negative"):
        bootstrap_ratios(np.ones((3, 1)), -np.ones((3, 1)), [0, 1, 2])
