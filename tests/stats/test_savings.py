"""Savings curves of selective re-judging against direct counts and an independent bootstrap."""

from __future__ import annotations

import numpy as np
import pytest

from app.stats.savings import RANDOM, cumulative_recovery, savings_curves


def _data(n: int = 80, seed: int = 3) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n // 2), 2)[:n].astype(str)
    y = (rng.random(n) < 0.35).astype(int)
    good = y + rng.normal(scale=0.8, size=n)  # informative, distinct scores
    weak = y * 0.2 + rng.normal(size=n)
    return y, groups, {"probe": good, "baseline": weak}


def test_point_curves_equal_a_direct_count_and_random_is_its_expectation() -> None:
    y, groups, scores = _data()
    curves = savings_curves(y, groups, scores, resamples=200, seed=1)
    flips = y.sum()
    for name, s in scores.items():
        found = np.concatenate(([0], np.cumsum(y[np.argsort(-s)])))  # flips in the top k
        np.testing.assert_allclose(curves[name].recovered, found / flips)
        for q in (0.5, 0.8):
            assert curves[name].k_for[q] == int(np.argmax(found >= q * flips))
        assert curves[name].area == pytest.approx(np.mean(found[1:] / flips))
    n = y.size
    np.testing.assert_allclose(curves[RANDOM].recovered, np.arange(n + 1) / n)
    assert curves[RANDOM].k_for[0.5] == int(np.ceil(0.5 * n))
    # An informative ranker needs fewer calls than random for half of the flips.
    assert curves["probe"].k_for[0.5] < curves[RANDOM].k_for[0.5]


def test_ties_share_their_flips_evenly() -> None:
    # Scores 2, 1, 1, 1, 0: the tied block of three holds one flip of its three pairs.
    s = np.array([2.0, 1.0, 1.0, 1.0, 0.0])
    y = np.array([1, 0, 1, 0, 1])
    got = cumulative_recovery(s, y, np.ones(5), np.arange(6))
    np.testing.assert_allclose(got, [0, 1, 1 + 1 / 3, 1 + 2 / 3, 2, 3])


def _reference_interval(
    y: np.ndarray, groups: np.ndarray, s: np.ndarray, resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Independent group bootstrap: draw questions, expand the pairs, count in the top x."""
    rng = np.random.default_rng(seed)
    keys = np.unique(groups)
    members = {g: np.flatnonzero(groups == g) for g in keys}
    n = y.size
    shares = np.full((resamples, n + 1), np.nan)
    for r in range(resamples):
        drawn = rng.choice(keys, size=keys.size, replace=True)
        idx = np.concatenate([members[g] for g in drawn])
        ys, ss = y[idx], s[idx]
        ys = ys[np.argsort(-ss, kind="stable")]
        if ys.sum() == 0:
            continue
        cum = np.concatenate(([0.0], np.cumsum(ys)))
        x = np.arange(n + 1) / n * idx.size  # the same share of the resample's pairs
        lo = np.floor(x).astype(int)
        nxt = np.append(ys, 0.0)[lo]  # the pair entered in part
        shares[r] = (cum[lo] + (x - lo) * nxt) / ys.sum()
    return np.nanpercentile(shares, 2.5, axis=0), np.nanpercentile(shares, 97.5, axis=0)


def test_intervals_match_an_independent_group_bootstrap() -> None:
    y, groups, scores = _data(n=60, seed=5)
    curves = savings_curves(y, groups, scores, resamples=1000, seed=2)
    low, high = _reference_interval(y, groups, scores["probe"], 1000, seed=11)
    # Monte-Carlo error of a 2.5% / 97.5% percentile of 1,000 resamples of a share: ~0.04.
    assert np.nanmax(np.abs(curves["probe"].low - low)) < 0.09
    assert np.nanmax(np.abs(curves["probe"].high - high)) < 0.09
    c = curves["probe"]
    assert (c.low <= c.recovered + 1e-9).all() and (c.recovered <= c.high + 1e-9).all()
    # The random order's interval is realised orders, not a line: it has width mid-curve.
    mid = y.size // 2
    assert curves[RANDOM].high[mid] - curves[RANDOM].low[mid] > 0.1
    lo80, hi80 = c.k_for_ci[0.8]
    assert lo80 is not None and hi80 is not None and lo80 <= c.k_for[0.8] <= hi80


def test_bad_inputs_are_refused() -> None:
    y, groups, scores = _data(n=10)
    with pytest.raises(ValueError, match="finite"):
        savings_curves(y, groups, {"p": np.full(10, np.nan)}, resamples=10)
    with pytest.raises(ValueError, match="random order"):
        savings_curves(y, groups, {RANDOM: scores["probe"]}, resamples=10)
