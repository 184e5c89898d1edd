"""The compiled loops (app/stats/_compiled.py) against numpy references."""

from __future__ import annotations

import numpy as np

from app.stats import _kernels
from app.stats._compiled import count_draws
from app.stats.bootstrap import stratified_multiplicities


def test_draw_counts_equal_bincount_with_and_without_strata() -> None:
    rng = np.random.default_rng(5)
    drawn = rng.integers(0, 40, 500).astype(np.int32)
    row = np.full(40, 7, dtype=np.uint8)  # stale contents must not survive
    assert count_draws(drawn, None, row)
    assert np.array_equal(row, np.bincount(drawn, minlength=40))
    offsets = np.repeat(np.array([0, 10], dtype=np.int64), [200, 300])
    local = np.concatenate([rng.integers(0, 10, 200), rng.integers(0, 30, 300)]).astype(np.int32)
    row = np.zeros(40, dtype=np.int32)
    assert count_draws(local, offsets, row)
    assert np.array_equal(row, np.bincount(local + offsets, minlength=40))


def test_a_count_that_overflows_its_dtype_is_refused_and_fits_a_wider_one() -> None:
    drawn = np.zeros(300, dtype=np.int32)
    assert not count_draws(drawn, None, np.zeros(3, dtype=np.uint8))
    wide = np.zeros(3, dtype=np.int32)
    assert count_draws(drawn, None, wide)
    assert wide.tolist() == [300, 0, 0]


def test_stratified_multiplicities_fill_each_stratum_to_its_size() -> None:
    rows = stratified_multiplicities((3, 5, 1), resamples=50, seed=2)
    assert rows.dtype == np.int32 and rows.shape == (50, 9)
    assert (rows[:, :3].sum(axis=1) == 3).all()
    assert (rows[:, 3:8].sum(axis=1) == 5).all()
    assert (rows[:, 8] == 1).all()


def test_boolean_weights_count_as_zero_or_one() -> None:
    rng = np.random.default_rng(8)
    y = rng.random(200) < 0.4
    p = np.round(rng.random(200), 1)  # ties among positives and negatives
    units = rng.integers(0, 60, 200).astype(np.intp)
    chosen = rng.random((4, 60)) < 0.5
    plan = _kernels.RankPlan(y, p, units, 60)
    as_bool = plan.evaluate(chosen)
    as_bytes = plan.evaluate(chosen.astype(np.uint8))
    assert np.array_equal(as_bool.twice_concordant, as_bytes.twice_concordant)
    assert as_bool.precision_sum is not None and as_bytes.precision_sum is not None
    assert np.array_equal(as_bool.precision_sum, as_bytes.precision_sum)
    assert np.array_equal(
        as_bool.pos, chosen.astype(np.int64) @ np.bincount(units[y], minlength=60)
    )
