"""Savings curves of selective re-judging: flips recovered against extra judge calls.

A judge that judged each pair in one order has its position flips hidden. Re-judging the ``k``
pairs a ranker scores highest in the other order reveals the flips among them; the savings curve
is the number (and the share) of all flips recovered against ``k``, the extra judge calls.

Ties share their flips evenly: a block of tied scores is entered as a whole, and the curve is
linear inside it (the expectation over random tie-breaking). A ranker that scores every pair the
same is therefore the random order's expectation, ``k * F / n``, exactly.

Intervals are percentile intervals of a group bootstrap (the question is the unit): in each
resample the pairs are weighted by their group's multiplicity and the curve is read at the same
budget fractions ``k / n``. The random order draws a fresh permutation in every resample, so its
interval covers both the resampling of pairs and the randomness of the order itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from app.stats.bootstrap import group_multiplicities, percentile_interval

__all__ = ["RANDOM", "SavingsCurve", "cumulative_recovery", "savings_curves"]

RANDOM = "random"
TARGETS: tuple[float, ...] = (0.5, 0.8)


def cumulative_recovery(
    scores: ArrayLike, y: ArrayLike, weights: ArrayLike, budgets: ArrayLike
) -> NDArray[np.float64]:
    """Weighted flips recovered after re-judging a weighted budget, ties entered as one block.

    Parameters
    ----------
    scores : array-like of float, shape (n,)
        Ranker scores; higher is re-judged first.
    y : array-like of {0, 1}, shape (n,)
        Flip labels.
    weights : array-like of float, shape (n,)
        Multiplicity of each pair (1 for the data as it is; a resample's counts otherwise).
    budgets : array-like of float, shape (m,)
        Extra judge calls (in weight units), each in ``[0, weights.sum()]``.

    Returns
    -------
    ndarray of float64, shape (m,)
        Flips (in weight units) among the first ``budgets`` re-judged pairs.

    """
    s = np.asarray(scores, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    yw = np.asarray(y, dtype=np.float64) * w
    order = np.argsort(-s, kind="stable")
    s, w, yw = s[order], w[order], yw[order]
    # Block ends: the last position of each run of equal scores.
    ends = np.flatnonzero(np.append(s[1:] != s[:-1], True))
    cum_w = np.concatenate(([0.0], np.cumsum(w)[ends]))
    cum_f = np.concatenate(([0.0], np.cumsum(yw)[ends]))
    # Zero-weight blocks repeat a cumulative weight: np.interp needs increasing x, and a
    # repeated x adds nothing to the curve.
    keep = np.append(True, np.diff(cum_w) > 0)
    return np.interp(np.asarray(budgets, dtype=np.float64), cum_w[keep], cum_f[keep])


@dataclass(frozen=True)
class SavingsCurve:
    """One ranker's savings curve on ``n`` pairs holding ``flips`` flips.

    ``recovered[k]`` is the share of flips found with ``k`` extra calls (``k = 0..n``), with its
    interval in ``low`` / ``high`` (all shape ``(n + 1,)``). ``k_for[q]`` is the smallest ``k``
    that recovers at least the share ``q`` (with ``k_for_ci[q]``). ``area`` is the mean share
    recovered over ``k = 1..n`` (1 = every flip first, ``(n + 1) / 2n`` = random).
    """

    ranker: str
    n: int
    flips: int
    recovered: NDArray[np.float64]
    low: NDArray[np.float64]
    high: NDArray[np.float64]
    k_for: dict[float, int]
    k_for_ci: dict[float, tuple[float | None, float | None]]
    area: float
    area_ci: tuple[float | None, float | None]
    area_replicates: NDArray[np.float64]


def _smallest_k(shares: NDArray[np.float64], target: float) -> NDArray[np.float64]:
    """Smallest column index whose share reaches ``target`` per row; ``shares`` is ``[r, n+1]``."""
    reached = shares >= target - 1e-12
    return np.where(reached.any(axis=1), reached.argmax(axis=1), np.nan).astype(np.float64)


def savings_curves(
    y: ArrayLike,
    groups: Sequence[str] | ArrayLike,
    scores: Mapping[str, ArrayLike],
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    targets: Sequence[float] = TARGETS,
) -> dict[str, SavingsCurve]:
    """Savings curves of each ranker and of the random order, with group-bootstrap intervals.

    Parameters
    ----------
    y : array-like of {0, 1}, shape (n,)
        Flip label of each pair (judged in both orders).
    groups : array-like, shape (n,)
        Question of each pair: the bootstrap's resampling unit.
    scores : mapping of str to array-like of float, shape (n,)
        Each ranker's score of each pair (finite). ``"random"`` is added.
    resamples : int
        Bootstrap resamples B.
    seed : int
        Root seed of the resamples (and of the random orders drawn in them).
    level : float
        Interval coverage.
    targets : sequence of float
        Shares of flips for which the needed ``k`` is reported.

    Returns
    -------
    dict of str to SavingsCurve
        One per ranker, then ``"random"``; the same resamples for all, so differences of
        their areas are paired.

    """
    yv = np.asarray(y, dtype=np.float64)
    n = yv.size
    if n == 0:
        raise ValueError("no pairs")
    if RANDOM in scores:
        raise ValueError(f"{RANDOM!r} is the random order; name the ranker otherwise")
    arrays = {name: np.asarray(v, dtype=np.float64) for name, v in scores.items()}
    for name, v in arrays.items():
        if v.shape != (n,) or not np.isfinite(v).all():
            raise ValueError(f"ranker {name!r}: need {n} finite scores")
    _, codes = np.unique(np.asarray(groups), return_inverse=True)
    n_groups = int(codes.max()) + 1
    flips = float(yv.sum())
    k = np.arange(n + 1, dtype=np.float64)
    ones = np.ones(n)
    arrays[RANDOM] = np.zeros(n)  # one tied block: the random order's expectation
    shares = {name: cumulative_recovery(s, yv, ones, k) / flips if flips else k * np.nan
              for name, s in arrays.items()}  # fmt: skip
    weights = group_multiplicities(n_groups, resamples, seed)[:, codes].astype(np.float64)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    boot = {name: np.full((resamples, n + 1), np.nan) for name in arrays}
    for r in range(resamples):
        w = weights[r]
        total, found = w.sum(), float(w @ yv)
        if not found:
            continue  # no flip drawn: no share is defined
        budgets = k / n * total
        for name, s in arrays.items():
            # The random order is realised in each resample (ties of duplicated pairs remain).
            s_r = rng.random(n) if name == RANDOM else s
            boot[name][r] = cumulative_recovery(s_r, yv, w, budgets) / found
    out: dict[str, SavingsCurve] = {}
    for name in arrays:
        b = boot[name]
        bounds = [percentile_interval(b[:, j], level)[:2] for j in range(n + 1)]
        low = np.array([np.nan if lo is None else lo for lo, _ in bounds])
        high = np.array([np.nan if hi is None else hi for _, hi in bounds])
        k_for: dict[float, int] = {}
        k_for_ci: dict[float, tuple[float | None, float | None]] = {}
        for q in targets:
            point = _smallest_k(shares[name][None, :], q)[0]
            k_for[q] = -1 if np.isnan(point) else int(point)
            k_for_ci[q] = percentile_interval(_smallest_k(b, q), level)[:2]
        area_reps = b[:, 1:].mean(axis=1)
        out[name] = SavingsCurve(
            ranker=name,
            n=n,
            flips=int(flips),
            recovered=shares[name],
            low=low,
            high=high,
            k_for=k_for,
            k_for_ci=k_for_ci,
            area=float(shares[name][1:].mean()),
            area_ci=percentile_interval(area_reps, level)[:2],
            area_replicates=area_reps,
        )
    return out
