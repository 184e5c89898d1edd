"""Paired group-bootstrap differences of a detector's metrics under two labelings of its items.

Review changes some labels of a benchmark (and may label or unlabel items); the defect report
shows each detector's metrics against the original and the resolved labels and their
difference. Both sides are resampled from one draw of the groups of every item labelled on
either side: resample b weighs each item by its group's multiplicity, and each side computes
its metric on the items it labels. The difference's replicate b is then resolved minus
original on the same groups, and where review only relabels items the two sides' replicates
are those of :func:`app.stats.bootstrap.group_bootstrap` with the same seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from app.stats import _validate, bootstrap
from app.stats.bootstrap import Difference, Estimate, percentile_interval
from app.stats.registry import HIGHER_IS_BETTER, REGISTRY, Need

__all__ = ["relabel_differences"]


def relabel_differences(
    original: ArrayLike,
    resolved: ArrayLike,
    scores: ArrayLike,
    groups: ArrayLike,
    *,
    metrics: Sequence[str] = ("auroc", "auprc", "brier"),
    threshold: float = 0.5,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Difference]:
    """Resolved-minus-original differences of metrics, with paired group-bootstrap intervals.

    Parameters
    ----------
    original, resolved : array-like of float, shape (n,)
        Each item's binary label (1 positive, 0 negative) before and after review; NaN where
        the item has no label on that side. Every item is labelled on at least one side.
    scores : array-like of float, shape (n,)
        The detector's finite score of each item.
    groups : array-like, shape (n,)
        Group key of each item; the resampling unit, shared by both sides.
    metrics : sequence of str
        Registry metrics that need no strata (:data:`app.stats.registry.REGISTRY`).
    threshold, resamples, seed, level
        As for :func:`app.stats.bootstrap.group_bootstrap`.

    Returns
    -------
    dict of str to Difference
        Per metric, ``estimate`` is resolved minus original (``value`` ``None`` unless both
        sides are defined) with its percentile interval over the resamples where both are,
        and ``first_better`` the share of those where the resolved side scores better.

    Raises
    ------
    ValueError
        Malformed inputs, an item labelled on neither side, or a metric that needs strata.

    """
    before = _side(original, None, "original")
    n = before.size
    after = _side(resolved, n, "resolved")
    p = _validate.scores(scores, n, "scores")
    labelled = [~np.isnan(before), ~np.isnan(after)]
    if n == 0 or not (labelled[0] | labelled[1]).all() or not all(k.any() for k in labelled):
        raise ValueError("every item needs a label on one side, and each side an item")
    chosen = tuple(REGISTRY[name] for name in dict.fromkeys(metrics))
    if any(Need.STRATA in m.needs or m.on_answers for m in chosen):
        raise ValueError("metrics that need strata or answers have no relabel difference")
    units, n_units = _validate.keys(groups, n, "groups")
    resamples = _validate.resample_count(resamples)
    seed = _validate.seed_value(seed)
    level = _validate.confidence_level(level)
    engines = [
        bootstrap._Engine(
            _validate.labels(y[keep]), [p[keep]], units[keep], n_units, chosen, None, threshold
        )
        for y, keep in zip((before, after), labelled, strict=True)
    ]
    ones = np.ones((1, n_units), np.int32)
    points = [engine.compute(ones) for engine in engines]
    replicates = [
        {m.name: np.full(resamples, np.nan) for m in chosen} for _ in engines
    ]  # fmt: skip

    def store(start: int, stop: int, weights: NDArray[np.int32]) -> None:
        for side, engine in enumerate(engines):
            for name, values in engine.compute(weights).items():
                replicates[side][name][start:stop] = values[0]

    bootstrap._for_each_chunk(
        store, seed, resamples, n_units, max(n, n_units), threads=1, chunk_size=None
    )
    out = {}
    for metric in chosen:
        name = metric.name
        deltas = replicates[1][name] - replicates[0][name]
        point = float(points[1][name][0, 0] - points[0][name][0, 0])
        value = None if np.isnan(point) else point
        estimate = Estimate.of(value, percentile_interval(deltas, level), resamples, n_units)
        better = None
        if estimate.valid:
            finite = deltas[~np.isnan(deltas)]
            wins = finite > 0 if HIGHER_IS_BETTER[name] else finite < 0
            better = float(wins.mean())
        out[name] = Difference(name, estimate, better)
    return out


def _side(values: ArrayLike, n: int | None, name: str) -> NDArray[np.float64]:
    """One side's labels as float64 of shape (n,): 0, 1 or NaN (checked by the engine)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or (n is not None and arr.size != n):
        raise ValueError(f"{name} must have shape ({'n' if n is None else n},)")
    return arr
