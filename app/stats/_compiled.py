"""The statistics kernels' compiled loops (numba): the integer rank kernel and the draw count.

Imported on first use by :meth:`app.stats._kernels.RankPlan.evaluate` and the bootstrap's
draws (importing numba costs 0.4 s, which nothing else should pay). In numpy the integer rank
kernel made nine passes over each resample's items (gathers, cumulative sums, products), each
through memory: at a million items it took 5 ms per detector and resample, 30 of the 45 s of
CPU of a cold metrics job with three detectors and 2,000 resamples. Fused here, the items are
read twice (negatives, then positives), in 1.4 ms. The numpy formulation of the same sums is
the plan's float path (``RankPlan._gathered``); the tests hold the two equal.
"""

from __future__ import annotations

import numba
import numpy as np
from numpy.typing import NDArray

# Compiled once per argument types, kept in __pycache__ (cache=True) so a new process loads
# it in milliseconds; nogil so the bootstrap's worker threads run chunks side by side.
_JIT = {"nogil": True, "cache": True, "boundscheck": False}


# Inlined into the loop by numba (a call per level passing six arrays cost 20x the work).
@numba.njit(inline="always", **_JIT)
def _advance(
    w: NDArray[np.integer],
    pos_units: NDArray[np.uint32],
    level_ends: NDArray[np.uint32] | None,
    ge: NDArray[np.uint32],
    gt: NDArray[np.uint32] | None,
    cneg: NDArray[np.integer],
    level: int,
    true_pos: int,
    float_lost: bool,
) -> tuple[int, int, float, float]:  # pragma: no cover - compiled
    """One positive level of a row: its positives' weight added to ``true_pos``.

    Returns the new ``true_pos``, the level's lost pairs (as an exact integer, or in float64
    when ``float_lost``; the other is 0) and its precision term.
    """
    # None (no ties) is a type: numba compiles the branch away, which a runtime test on an
    # empty array did not allow (it made the loop 7x slower).
    if level_ends is None:
        weight = np.int64(w[pos_units[level]])
    else:
        weight = np.int64(0)
        for i in range(np.int64(level_ends[level - 1]) if level > 0 else 0, level_ends[level]):
            weight += w[pos_units[i]]
    true_pos += weight
    above = cneg[ge[level]]
    # Lost pairs: the level's positives against the negatives at or above it, plus those
    # strictly above (twice the pairs minus these is twice the concordance).
    strictly = above if gt is None else cneg[gt[level]]
    lost_int = 0
    lost_float = 0.0
    if float_lost:
        lost_float = float(weight) * float(above + strictly)
    else:
        lost_int = weight * (above + strictly)
    # Precision at the level's threshold, weighted by its positives; `called` is 0 only where
    # the level's own weight is 0 (so is its term).
    called = true_pos + above
    return true_pos, lost_int, lost_float, weight * (true_pos / (called if called > 0 else 1))


@numba.njit(**_JIT)
def counted_rows(
    weights: NDArray[np.integer],
    neg_units: NDArray[np.uint32],
    pos_units: NDArray[np.uint32],
    level_ends: NDArray[np.uint32] | None,
    ge: NDArray[np.uint32],
    gt: NDArray[np.uint32] | None,
    precision: bool,
    float_lost: bool,
    cneg: NDArray[np.integer],
    pos_out: NDArray[np.integer],
    neg_out: NDArray[np.integer],
    twice_out: NDArray[np.float64],
    precision_out: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled; run (and covered) through RankPlan.evaluate
    """Ranking sums of each row of integer unit ``weights`` (c, n_units), into the outputs.

    The plan is read from the highest score down (``RankPlan._descending``): ``neg_units``
    and ``pos_units`` (unit of each negative / positive), ``level_ends`` (positives at or
    above each distinct positive score, ``None`` when every level is one positive), ``ge`` and
    ``gt`` (negatives at or above / strictly above each level; ``gt`` ``None`` when no negative
    ties a level). ``cneg`` (n_neg + 1,) is scratch for the cumulated negative weights, in
    a dtype that holds every row's total; ``float_lost`` sums the lost pairs in float64
    (weights so large that int64 products could overflow), else exactly in int64. Outputs,
    each of shape (c,): positive and negative totals, twice the concordant count, and the
    precision sum (left alone unless ``precision``).
    """
    n_neg = neg_units.size
    n_levels = ge.size
    paired = n_levels - n_levels % 2
    for r in range(weights.shape[0]):
        w = weights[r]
        total_neg = 0
        cneg[0] = 0
        for j in range(n_neg):
            total_neg += w[neg_units[j]]
            cneg[j + 1] = total_neg
        true_pos = 0
        lost_int = 0
        lost_float = 0.0
        # Levels two at a time into two partial sums: two dependency chains of float adds
        # instead of one (40% faster), summed in a fixed order whatever the chunk.
        even = 0.0
        odd = 0.0
        for level in range(0, paired, 2):
            true_pos, li, lf, term = _advance(
                w, pos_units, level_ends, ge, gt, cneg, level, true_pos, float_lost
            )
            lost_int += li
            lost_float += lf
            even += term
            true_pos, li, lf, term = _advance(
                w, pos_units, level_ends, ge, gt, cneg, level + 1, true_pos, float_lost
            )
            lost_int += li
            lost_float += lf
            odd += term
        if paired < n_levels:
            true_pos, li, lf, term = _advance(
                w, pos_units, level_ends, ge, gt, cneg, paired, true_pos, float_lost
            )
            lost_int += li
            lost_float += lf
            even += term
        pos_out[r] = true_pos
        neg_out[r] = total_neg
        lost = lost_float if float_lost else float(lost_int)
        twice_out[r] = 2.0 * (float(true_pos) * float(total_neg)) - lost
        if precision:
            precision_out[r] = even + odd


@numba.njit(**_JIT)
def count_draws(
    drawn: NDArray[np.int32], offsets: NDArray[np.int64] | None, row: NDArray[np.integer]
) -> bool:  # pragma: no cover - compiled; run through the bootstrap's draws
    """How many times each unit was drawn, into ``row`` (n_units,); ``False`` if one overflows.

    ``drawn`` holds one unit per slot, numbered within the slot's stratum; ``offsets`` (one
    per slot, ``None`` for a single stratum) is the stratum's first unit. ``row`` is then left
    unfinished: the caller counts again in a wider dtype. One pass, in place: bincount's int64
    counts and their copy into bytes cost twice as much.
    """
    row[:] = 0
    limit = np.iinfo(row.dtype).max
    for i in range(drawn.size):
        unit = drawn[i] if offsets is None else drawn[i] + offsets[i]
        if row[unit] == limit:
            return False
        row[unit] += 1
    return True
