"""The Wilson interval against its definition, solved numerically."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from app.stats.proportions import wilson_interval


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (7, 30), (1, 1)])
def test_the_bounds_are_where_the_score_test_just_accepts(k: int, n: int) -> None:
    # Wilson's interval holds the p whose score statistic |k/n - p| / sqrt(p (1-p) / n) is at
    # most z; its bounds solve equality (or are 0 or 1).
    z = norm.ppf(0.975)
    p_hat = k / n

    def excess(p: float) -> float:
        return abs(p_hat - p) - z * np.sqrt(p * (1 - p) / n)

    low = 0.0 if k == 0 else brentq(excess, 1e-12, p_hat - 1e-12, xtol=1e-14)
    high = 1.0 if k == n else brentq(excess, p_hat + 1e-12, 1 - 1e-12, xtol=1e-14)
    assert wilson_interval(k, n) == pytest.approx((low, high), abs=1e-9)


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(4, 3)
