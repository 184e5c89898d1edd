"""Group-bootstrap percentile intervals for detector metrics and paired detector differences.

The resampling unit is the group (e.g. the question behind several pairs): each resample draws
``n_groups`` groups with replacement and takes every item of each drawn group, as often as the
group was drawn. A resample is held as a row of group multiplicities, and all metrics of all
detectors are computed from those rows at once, chunk by chunk, without a per-resample call into
scikit-learn.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from app.stats import _kernels, _validate
from app.stats.registry import (
    HIGHER_IS_BETTER,
    METRICS,
    REGISTRY,
    Additive,
    Categorical,
    Metric,
    Need,
    Ranked,
    StratifiedRanked,
    TopK,
)

__all__ = [
    "HIGHER_IS_BETTER",
    "METRICS",
    "BootstrapResult",
    "Difference",
    "Estimate",
    "RatioResult",
    "bootstrap_mean",
    "bootstrap_ratios",
    "group_bootstrap",
    "group_bootstrap_answers",
    "group_bootstraps",
    "group_multiplicities",
    "percentile_interval",
    "set_min_interval_groups",
    "sliced_group_bootstrap",
    "stack_results",
    "stratified_multiplicities",
    "too_few_groups",
]

# Fewer resampled groups than the minimum give no interval but TOO_FEW_GROUPS: one group makes
# every resample the data itself (a zero-width interval), and a handful make intervals far too
# narrow. The numerics alone withhold nothing (a minimum of 1); the server, the CLI and the
# workers set Settings.min_interval_groups (default 10) when they open their store.
TOO_FEW_GROUPS = "too few groups for an interval"
_min_interval_groups = 1


def set_min_interval_groups(minimum: int) -> None:
    """Set the fewest resampled groups that give an interval (``Settings.min_interval_groups``)."""
    global _min_interval_groups
    _min_interval_groups = max(int(minimum), 1)


def too_few_groups(n_groups: int) -> str | None:
    """:data:`TOO_FEW_GROUPS` with the counts when ``n_groups`` is under the minimum, else None.

    Parameters
    ----------
    n_groups : int
        Groups (resampling units) the bootstrap drew from.

    Returns
    -------
    str or None
        The reason an interval is withheld, e.g. ``"too few groups for an interval (1 < 10)"``.

    """
    if n_groups >= _min_interval_groups:
        return None
    return f"{TOO_FEW_GROUPS} ({n_groups} < {_min_interval_groups})"


# Elements per (chunk x units) working array, and the fewest resamples in a chunk. The rank
# kernels run a few resamples at a time whatever the chunk (their arrays stay in cache); the
# unit-level products (means, the transposed weights) pay per chunk for every unit, so below 16
# resamples a chunk costs more per resample: measured on a 2-core machine at 250,000 units, 16
# resamples per chunk take half the time of 4 (and less than 32 or 64).
_CHUNK_ELEMENTS = 1 << 20
_MIN_CHUNK = 16
_MAX_THREADS = 8
# Draws of up to 64M multiplicities (2,000 resamples of 32,000 groups) are kept for reuse, stored
# as one byte each (a group is drawn more than 255 times in no realistic resample), 128 MB in all.
_KEPT_DRAW_ELEMENTS = 1 << 26
_KEPT_DRAWS_BUDGET = 1 << 27


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its bootstrap percentile interval.

    ``value`` is ``None`` when the metric is undefined on the full data; ``low``/``high`` are
    ``None`` when no resample gave a defined value (or no resamples were drawn), or when the
    data had too few groups, which ``reason`` then says (:func:`too_few_groups`). ``valid``
    counts the resamples that entered the interval, out of ``resamples``.
    """

    value: float | None
    low: float | None
    high: float | None
    valid: int
    resamples: int
    reason: str | None = None

    @classmethod
    def of(
        cls,
        value: float | None,
        interval: tuple[float | None, float | None, int],
        resamples: int,
        n_groups: int,
    ) -> Estimate:
        """The estimate of ``value`` with a :func:`percentile_interval` of ``n_groups`` groups.

        The one place an interval is withheld for too few groups: every estimate of this
        module (and of ``app.stats.relabel`` and ``app.stats.agreement``) is made here.
        """
        reason = too_few_groups(n_groups)
        if reason is not None:
            return cls(value, None, None, 0, resamples, reason)
        low, high, valid = interval
        return cls(value, low, high, valid, resamples)

    @property
    def ci(self) -> list[float] | None:
        """The interval as ``[low, high]``, or ``None``."""
        if self.low is None or self.high is None:
            return None
        return [self.low, self.high]


@dataclass(frozen=True)
class Difference:
    """A paired difference ``first - second`` of one metric between two detectors.

    ``first_better`` is the fraction of valid resamples in which the first detector is strictly
    better (higher, or lower for Brier); ``None`` when no resample was valid.
    """

    metric: str
    estimate: Estimate
    first_better: float | None


def _float_or_none(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def percentile_interval(
    replicates: ArrayLike, level: float = 0.95
) -> tuple[float | None, float | None, int]:
    """Percentile interval of bootstrap replicates, ignoring undefined (NaN) ones.

    Parameters
    ----------
    replicates : array-like of float, shape (B,)
        One metric value per resample; NaN marks a resample where it was undefined.
    level : float
        Coverage, strictly between 0 and 1 (0.95 gives the 2.5th and 97.5th percentiles).

    Returns
    -------
    (low, high, valid) : tuple of (float or None, float or None, int)
        Linear-interpolated percentiles of the valid replicates and their count; ``None``
        bounds when no replicate is valid.

    """
    level = _validate.confidence_level(level)
    values = np.asarray(replicates, dtype=np.float64).reshape(-1)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return None, None, 0
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high), int(values.size)


def _resample_seeds(seed: int, resamples: int) -> list[np.random.SeedSequence]:
    # One independent stream per resample: resample b is the same whatever the chunk size or
    # the number of threads, so results are reproducible from (seed, groups) alone. A fresh
    # root each call: spawn() advances a SeedSequence, so a shared one would not reproduce.
    return np.random.SeedSequence(_validate.seed_value(seed)).spawn(resamples)


def _fill_multiplicities(
    out: NDArray[np.integer], seeds: Sequence[np.random.SeedSequence], strata: tuple[int, ...]
) -> bool:
    """Draw rows of multiplicities into ``out``; ``False`` if one does not fit its dtype.

    ``out`` is then left unfinished. A byte holds every multiplicity a realistic resample draws.
    """
    # Row b: one generator from child stream b draws one unit per slot, units numbered stratum
    # by stratum and each stratum's slots drawing among its own units (one call with an array
    # of bounds: a call per stratum would cost more than the generator).
    from app.stats._compiled import count_draws  # numba: imported on first use

    sizes = np.asarray(strata, dtype=np.int64)
    n_units = int(sizes.sum())
    bounds = np.repeat(sizes, sizes) if sizes.size > 1 else n_units
    offsets = np.repeat(np.cumsum(sizes) - sizes, sizes) if sizes.size > 1 else None
    for row, child in zip(out, seeds, strict=True):
        # int32 draws are the int64 draws (both take 32-bit bounded draws below 2**32), at
        # less than half the cost.
        drawn = np.random.Generator(np.random.PCG64(child)).integers(
            0, bounds, size=n_units, dtype=np.int32
        )
        if not count_draws(drawn, offsets, row):
            return False
    return True


def _draw(
    seeds: Sequence[np.random.SeedSequence],
    strata: tuple[int, ...],
    out: NDArray[np.uint8] | None = None,
) -> NDArray[np.integer]:
    """Multiplicities of ``seeds``' resamples, as bytes (into ``out``) when they fit, else int32."""
    n_units = sum(strata)
    if out is None:
        out = np.empty((len(seeds), n_units), dtype=np.uint8)
    if _fill_multiplicities(out, seeds, strata):
        return out
    wide = np.empty((len(seeds), n_units), dtype=np.int32)
    _fill_multiplicities(wide, seeds, strata)
    return wide


def _strata(n_units: int | Sequence[int]) -> tuple[int, ...]:
    """Stratum sizes as a tuple: an int is one stratum of that many units."""
    return (int(n_units),) if isinstance(n_units, int | np.integer) else tuple(map(int, n_units))


class _KeptDraws:
    """Recent draws by ``(seed, B, stratum sizes)``, up to a total number of bytes.

    Drawing costs a generator per resample (0.6 s for 2,000 resamples of 25,000 groups), as
    much as the kernels, and the draws depend only on the key, which every detector of a
    metrics request shares (all slices share one stratified draw). Arrays are read-only:
    every caller gets the same one; they are stored as uint8 when every multiplicity fits.
    """

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._kept: OrderedDict[tuple[int, int, tuple[int, ...]], NDArray[np.integer]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def get(self, seed: int, resamples: int, n_units: int | Sequence[int]) -> NDArray[np.integer]:
        """:func:`stratified_multiplicities` ``(n_units, resamples, seed)``, drawn once.

        ``n_units`` is the number of units, or the unit count of each stratum.
        """
        key = (seed, resamples, _strata(n_units))
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        # Drawn outside the lock: two threads may draw the same key, with equal results.
        drawn = _draw(_resample_seeds(seed, resamples), key[2])
        drawn.setflags(write=False)
        with self._lock:
            self._kept[key] = drawn
            total = sum(a.nbytes for a in self._kept.values())
            while total > self._budget and len(self._kept) > 1:
                _, dropped = self._kept.popitem(last=False)
                total -= dropped.nbytes
        return drawn


_KEPT = _KeptDraws(_KEPT_DRAWS_BUDGET)


def group_multiplicities(n_groups: int, resamples: int, seed: int = 0) -> NDArray[np.int32]:
    """How many times each group is drawn in each resample.

    Parameters
    ----------
    n_groups : int
        Number of groups; each resample draws this many, uniformly with replacement.
    resamples : int
        Number of resamples B.
    seed : int
        Non-negative root seed; resample b uses the b-th child stream of ``SeedSequence(seed)``.

    Returns
    -------
    ndarray of int32, shape (B, n_groups)
        Row sums equal ``n_groups``. These are the multiplicities ``group_bootstrap`` uses with
        the same seed and group coding (groups in sorted key order).

    """
    return stratified_multiplicities((n_groups,), resamples, seed)


def stratified_multiplicities(
    strata: Sequence[int], resamples: int, seed: int = 0
) -> NDArray[np.int32]:
    """How many times each group is drawn in each resample, resampling within strata.

    Parameters
    ----------
    strata : sequence of int, length S
        Number of groups in each stratum (e.g. each slice); groups are numbered stratum by
        stratum. Each resample draws, in each stratum, as many groups as it has, uniformly
        with replacement among its own groups (one ``integers`` call with the bounds of every
        slot, strata in order).
    resamples : int
        Number of resamples B.
    seed : int
        Non-negative root seed; resample b uses the b-th child stream of ``SeedSequence(seed)``
        for all its strata, in order. One stratum gives :func:`group_multiplicities`.

    Returns
    -------
    ndarray of int32, shape (B, sum(strata))
        The row sums over each stratum's columns equal that stratum's size.

    """
    sizes = _strata(strata)
    if not sizes or min(sizes) < 1:
        raise ValueError(f"every stratum needs >= 1 group, got {list(sizes)}")
    resamples = _validate.resample_count(resamples)
    out = np.empty((resamples, sum(sizes)), dtype=np.int32)
    _fill_multiplicities(out, _resample_seeds(seed, resamples), sizes)
    return out


@dataclass(frozen=True)
class BootstrapResult:
    """Point values and per-resample replicates of several metrics for k detectors.

    Attributes
    ----------
    metrics : tuple of str
    point : dict of str to ndarray of float64, shape (k,)
        Metric on the full data; NaN where undefined.
    replicates : dict of str to ndarray of float64, shape (k, B)
        Metric on each resample; NaN where undefined in that resample.
    level : float
    seed : int
    n_groups : int
    n_items : int
        Items the bootstrap resampled (0 when not recorded).

    """

    metrics: tuple[str, ...]
    point: dict[str, NDArray[np.float64]]
    replicates: dict[str, NDArray[np.float64]]
    level: float
    seed: int
    n_groups: int
    n_items: int = 0

    @property
    def resamples(self) -> int:
        """Number of resamples B."""
        return next(iter(self.replicates.values())).shape[1] if self.replicates else 0

    def estimate(self, metric: str, detector: int = 0) -> Estimate:
        """Point value and percentile interval of ``metric`` for detector number ``detector``."""
        self._check(metric)
        interval = percentile_interval(self.replicates[metric][detector], self.level)
        value = _float_or_none(self.point[metric][detector])
        return Estimate.of(value, interval, self.resamples, self.n_groups)

    def difference(self, metric: str, first: int = 0, second: int = 1) -> Difference:
        """Paired difference ``first - second`` of ``metric`` over the same resamples."""
        self._check(metric)
        deltas = self.replicates[metric][first] - self.replicates[metric][second]
        interval = percentile_interval(deltas, self.level)
        point = self.point[metric][first] - self.point[metric][second]
        estimate = Estimate.of(_float_or_none(point), interval, self.resamples, self.n_groups)
        better: float | None = None
        if estimate.valid:
            finite = deltas[~np.isnan(deltas)]
            wins = finite > 0 if HIGHER_IS_BETTER[metric] else finite < 0
            better = float(wins.mean())
        return Difference(metric, estimate, better)

    def _check(self, metric: str) -> None:
        if metric not in self.point:
            raise ValueError(f"metric {metric!r} was not computed; have {list(self.metrics)}")


class _Engine:
    """Everything that does not change between resamples, prepared once per kernel family."""

    def __init__(
        self,
        y: NDArray[np.bool_],
        scores: list[NDArray[np.float64]],
        units: NDArray[np.intp],
        n_units: int,
        metrics: tuple[Metric, ...],
        strata: tuple[NDArray[np.intp], int] | None,
        threshold: float,
    ) -> None:
        self.k = len(scores)
        self._local = threading.local()  # one kernel workspace per worker thread
        self.unit_sizes = np.bincount(units, minlength=n_units).astype(np.int64)
        # Additive metrics only need per-group totals of their item values: one block of
        # columns per detector (one in all for a metric of the labels alone).
        blocks: list[NDArray[np.float64]] = []
        self.additive: list[tuple[Metric, Additive, list[slice]]] = []
        width = 0
        for metric in metrics:
            if not isinstance(metric.kernel, Additive):
                continue
            slots = []
            for p in scores if metric.per_detector else scores[:1]:
                block = metric.kernel.totals(y, p, threshold, units, n_units)
                slots.append(slice(width, width + block.shape[1]))
                width += block.shape[1]
                blocks.append(block)
            self.additive.append((metric, metric.kernel, slots))
        self.totals = np.hstack(blocks) if blocks else None
        # Built on first use, unless the engine's columns are read from a pass's shared means
        # (:func:`_share_means` sets `columns`, its columns there).
        self._unit_means: _kernels.UnitMeans | None = None
        self.columns: NDArray[np.intp] | None = None
        self.ranked = [(m, m.kernel) for m in metrics if isinstance(m.kernel, Ranked)]
        self.precision = any(kernel.precision for _, kernel in self.ranked)
        self.rank_plans = (
            [_kernels.RankPlan(y, p, units, n_units) for p in scores] if self.ranked else []
        )
        self.stratified = [(m, m.kernel) for m in metrics if isinstance(m.kernel, StratifiedRanked)]
        self.strat_plans = (
            [_kernels.StratifiedRankPlan(y, p, units, n_units, *strata) for p in scores]
            if strata is not None and self.stratified
            else []
        )
        self.top = [(m, m.kernel) for m in metrics if isinstance(m.kernel, TopK)]
        k_max = max((kernel.k for _, kernel in self.top), default=0)
        self.top_plans = (
            [_kernels.TopPlan(y, p, units, n_units, k_max) for p in scores] if self.top else []
        )

    def compute(
        self,
        weights: NDArray[np.integer],
        workspace: _kernels.Workspace | None = None,
        shared_means: NDArray[np.float64] | None = None,
    ) -> dict[str, NDArray[np.float64]]:
        """All metrics for rows of group multiplicities (c, n_units): name -> (k, c).

        ``workspace`` (this thread's) may be shared with other engines on the same weights:
        they then share its copies of them (transposed, row sums) and its buffers.
        ``shared_means`` are the pass's shared means of these weights (:func:`_share_means`).
        """
        c = weights.shape[0]
        if workspace is None:
            workspace = _thread_workspace(self._local)
        out: dict[str, NDArray[np.float64]] = {}
        if self.totals is not None:
            if self.columns is not None:
                assert shared_means is not None
                # C-ordered like the engine's own means, so that its reductions sum alike.
                means = np.take(shared_means, self.columns, axis=1)
            else:
                if self._unit_means is None:
                    self._unit_means = _kernels.UnitMeans(self.totals, self.unit_sizes)
                means = self._unit_means(weights, workspace)
            for metric, additive, slots in self.additive:
                values = np.stack([additive.reduce(means[:, slot]) for slot in slots])
                out[metric.name] = np.broadcast_to(values, (self.k, c))
        if self.rank_plans:
            sums = [
                plan.evaluate(weights, precision=self.precision, workspace=workspace)
                for plan in self.rank_plans
            ]
            for metric, ranked in self.ranked:
                out[metric.name] = np.stack([ranked.value(s) for s in sums])
        if self.strat_plans:
            pooled = [plan.evaluate(weights, workspace) for plan in self.strat_plans]
            for metric, stratified in self.stratified:
                out[metric.name] = np.stack([stratified.value(*s) for s in pooled])
        if self.top_plans:
            hits = {
                k: [plan.true_positives(weights, k) for plan in self.top_plans]
                for k in {kernel.k for _, kernel in self.top}
            }
            totals = [plan.positives(weights) for plan in self.top_plans]
            for metric, top in self.top:
                dens = totals if top.recall else [np.full(c, float(top.k))] * self.k
                out[metric.name] = np.stack(
                    [_kernels.ratio(h, d) for h, d in zip(hits[top.k], dens, strict=True)]
                )
        return out


def _thread_workspace(local: threading.local) -> _kernels.Workspace:
    """The kernel workspace of the calling thread in ``local``, made on first use."""
    workspace = getattr(local, "workspace", None)
    if workspace is None:
        workspace = local.workspace = _kernels.Workspace()
    return workspace  # type: ignore[no-any-return]


def _as_score_list(scores: ArrayLike | Sequence[ArrayLike], n: int) -> list[NDArray[np.float64]]:
    if isinstance(scores, np.ndarray) and scores.ndim == 2:
        rows: list[ArrayLike] = list(scores)
    elif isinstance(scores, np.ndarray) or not isinstance(scores, Sequence):
        rows = [scores]
    elif len(scores) > 0 and np.ndim(scores[0]) == 1:
        rows = list(scores)
    else:
        rows = [scores]
    if not rows:
        raise ValueError("scores must hold at least one detector")
    return [
        _validate.scores(row, n, "p" if len(rows) == 1 else f"scores[{i}]")
        for i, row in enumerate(rows)
    ]


def _thread_count(n_threads: int | None) -> int:
    if n_threads is None:
        try:
            available = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            available = os.cpu_count() or 1
        return max(1, min(available, _MAX_THREADS))
    if int(n_threads) < 1:
        raise ValueError(f"n_threads must be >= 1, got {n_threads}")
    return int(n_threads)


def _for_each_chunk(
    consume: Callable[[int, int, NDArray[np.int32]], None],
    seed: int,
    resamples: int,
    n_units: int | Sequence[int],
    width: int,
    *,
    threads: int,
    chunk_size: int | None,
) -> None:
    """Draw resamples chunk by chunk and hand each chunk's multiplicities to ``consume``.

    ``consume(start, stop, weights)`` receives rows ``start:stop`` as an (stop - start, n_units)
    array and must write only its own slice of any shared output, so chunks can run in threads.
    ``n_units`` is the number of units, or the unit count of each stratum
    (:func:`stratified_multiplicities`).
    """
    strata = _strata(n_units)
    n_units = sum(strata)
    if resamples == 0:
        return
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    step = chunk_size or max(_MIN_CHUNK, min(256, _CHUNK_ELEMENTS // max(1, width)))
    if resamples * n_units <= _KEPT_DRAW_ELEMENTS:
        drawn = _KEPT.get(seed, resamples, strata)

        def run(start: int) -> None:
            stop = min(start + step, resamples)
            consume(start, stop, drawn[start:stop])

    else:
        seeds = _resample_seeds(seed, resamples)
        # One buffer per thread: a fresh array per chunk would be first-touched page by page.
        local = threading.local()

        def run(start: int) -> None:
            stop = min(start + step, resamples)
            if getattr(local, "buffer", None) is None:
                local.buffer = np.empty((step, n_units), dtype=np.uint8)
            consume(start, stop, _draw(seeds[start:stop], strata, local.buffer[: stop - start]))

    starts = range(0, resamples, step)
    if threads == 1 or len(starts) == 1:
        for start in starts:
            run(start)
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(starts))) as pool:
        # list() waits for every chunk and re-raises the first worker exception here.
        list(pool.map(run, starts))


def group_bootstrap(
    y: ArrayLike,
    scores: ArrayLike | Sequence[ArrayLike],
    groups: ArrayLike,
    *,
    metrics: Sequence[str] = ("auroc", "auprc", "brier"),
    choice: ArrayLike | None = None,
    threshold: float = 0.5,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    n_threads: int | None = None,
    chunk_size: int | None = None,
) -> BootstrapResult:
    """Metrics of one or more detectors on the same group-bootstrap resamples.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.
    scores : array-like, shape (n,) or (k, n), or a sequence of k arrays of shape (n,)
        Scores of k detectors on the same items. Every detector sees the same resamples, so
        differences between detectors are paired.
    groups : array-like, shape (n,)
        Group key of each item (any scalar keys); the resampling unit.
    metrics : sequence of str
        Any of ``METRICS`` (:data:`app.stats.registry.REGISTRY`). A metric that needs
        probabilities (Brier) requires scores in [0, 1]; one that needs strata
        (choice-matched AUROC) requires ``choice``.
    choice : array-like, shape (n,), optional
        Stratum of each item (e.g. the AB choice), for the metrics that need strata.
    threshold : float
        Decision threshold of the metrics that need one, such as ``"accuracy"`` (positive when
        ``p >= threshold``).
    resamples : int
        Number of resamples B (0 gives point values only).
    seed : int
        Root seed; the same seed and data give identical resamples and intervals.
    level : float
        Interval coverage.
    n_threads : int, optional
        Worker threads (numpy releases the GIL in the kernels); default: available cores, at
        most 8. Results do not depend on it.
    chunk_size : int, optional
        Resamples evaluated together; default bounds each working array to about 1M elements.
        Results do not depend on it.

    Returns
    -------
    BootstrapResult
        ``.estimate(metric, detector)`` and ``.difference(metric, first, second)`` give the
        intervals; resamples where a metric is undefined (a class absent) are dropped from that
        metric's interval and counted in ``Estimate.valid``.

    Raises
    ------
    ValueError
        On invalid inputs, unknown metrics, or a metric whose requirements are not met.

    """
    request = _Request.of(y, scores, metrics, choice, threshold)
    (result,) = _bootstrap_requests(
        [request], groups, resamples, seed, level, n_threads=n_threads, chunk_size=chunk_size
    )
    return result


def group_bootstraps(
    y: ArrayLike,
    scores: Sequence[ArrayLike],
    groups: ArrayLike,
    metrics: Sequence[Sequence[str]],
    *,
    choice: ArrayLike | None = None,
    threshold: float = 0.5,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    n_threads: int | None = None,
) -> list[BootstrapResult]:
    """:func:`group_bootstrap` of each of several detectors, in one pass over the resamples.

    Result ``i`` equals ``group_bootstrap(y, scores[i], groups, metrics=metrics[i], ...)``
    (each detector's kernels see the same resamples either way); the resamples are drawn
    once for all, which at 250,000 groups costs as much as a detector's kernels.

    Parameters
    ----------
    y, groups, choice, threshold, resamples, seed, level, n_threads
        As for :func:`group_bootstrap`, shared by every detector.
    scores : sequence of k array-likes, shape (n,)
        Each detector's scores.
    metrics : sequence of k sequences of str
        Each detector's metrics.

    Returns
    -------
    list of BootstrapResult
        One result of one detector per entry of ``scores``.

    Raises
    ------
    ValueError
        As :func:`group_bootstrap`, or when ``scores`` and ``metrics`` differ in length.

    """
    if len(scores) != len(metrics):
        raise ValueError(f"{len(scores)} score arrays but {len(metrics)} metric lists")
    requests = [
        _Request.of(y, [p], wanted, choice, threshold)
        for p, wanted in zip(scores, metrics, strict=True)
    ]
    return _bootstrap_requests(requests, groups, resamples, seed, level, n_threads=n_threads)


def _bootstrap_requests(
    requests: Sequence[_Request],
    groups: ArrayLike,
    resamples: int,
    seed: int,
    level: float,
    *,
    n_threads: int | None,
    chunk_size: int | None = None,
) -> list[BootstrapResult]:
    """Every request on all its items, all of them on each chunk of one draw of resamples."""
    n = requests[0].n if requests else 0
    units, n_units = _validate.keys(groups, n, "groups")
    resamples = _validate.resample_count(resamples)
    seed = _validate.seed_value(seed)
    level = _validate.confidence_level(level)
    every = np.ones(n, dtype=bool)
    engines = [request.engine(every, units, n_units) for request in requests]
    shared = _share_means(engines) if len(engines) > 1 else None
    points = [_point_values(engine, n_units, shared) for engine in engines]
    replicates = [
        {m: np.full((engine.k, resamples), np.nan) for m in request.wanted}
        for request, engine in zip(requests, engines, strict=True)
    ]

    # One workspace per thread for every engine: the chunk is transposed once for them all.
    local = threading.local()

    def store(start: int, stop: int, weights: NDArray[np.int32]) -> None:
        workspace = _thread_workspace(local)
        means = None if shared is None else shared(weights, workspace)
        for engine, out in zip(engines, replicates, strict=True):
            for name, values in engine.compute(weights, workspace, means).items():
                out[name][:, start:stop] = values

    _for_each_chunk(
        store,
        seed,
        resamples,
        n_units,
        n_units,  # the kernels' working arrays are per unit and score level, not per item
        threads=_thread_count(n_threads),
        chunk_size=chunk_size,
    )
    return [
        BootstrapResult(request.wanted, point, out, level, seed, n_units, request.n)
        for request, point, out in zip(requests, points, replicates, strict=True)
    ]


@dataclass(frozen=True)
class _Request:
    """The checked inputs of a bootstrap of scores: labels, scores, metrics, strata."""

    labels: NDArray[np.bool_]
    scores: list[NDArray[np.float64]]
    wanted: tuple[str, ...]
    chosen: tuple[Metric, ...]
    strata: tuple[NDArray[np.intp], int] | None
    threshold: float

    @property
    def n(self) -> int:
        """Number of items."""
        return int(self.labels.size)

    @classmethod
    def of(
        cls,
        y: ArrayLike,
        scores: ArrayLike | Sequence[ArrayLike],
        metrics: Sequence[str],
        choice: ArrayLike | None,
        threshold: float,
    ) -> _Request:
        """Check the arguments :func:`group_bootstrap` documents (``ValueError`` if bad)."""
        labels = _validate.labels(y)
        n = labels.size
        score_list = _as_score_list(scores, n)
        wanted = tuple(dict.fromkeys(metrics))
        unknown = [m for m in wanted if m not in REGISTRY]
        if unknown or not wanted:
            raise ValueError(f"unknown metrics {unknown}; choose from {list(METRICS)}")
        chosen = tuple(REGISTRY[m] for m in wanted)
        on_answers = [m.name for m in chosen if m.on_answers]
        if on_answers:
            raise ValueError(f"{on_answers[0]} reads answers: use group_bootstrap_answers")
        for metric in chosen:
            if Need.PROBABILITIES not in metric.needs:
                continue
            for i, p in enumerate(score_list):
                if not _validate.is_probability(p):
                    raise ValueError(
                        f"{metric.name} needs probabilities in [0, 1]; detector {i} has range "
                        f"[{p.min():.6g}, {p.max():.6g}]"
                    )
        strata = None
        stratified = [m.name for m in chosen if Need.STRATA in m.needs]
        if stratified:
            if choice is None:
                raise ValueError(f"{stratified[0]} needs choice=, the stratum of each item")
            strata = _validate.keys(choice, n, "choice")
        if not math.isfinite(float(threshold)):
            raise ValueError(f"threshold must be finite, got {threshold!r}")
        return cls(labels, score_list, wanted, chosen, strata, float(threshold))

    def engine(self, items: NDArray[np.bool_], units: NDArray[np.intp], n_units: int) -> _Engine:
        """The kernels on the items where ``items`` (shape (n,)) holds, in units 0..n_units-1."""
        strata = None
        if self.strata is not None:
            # Codes of the whole sample: a subset may miss a stratum, which the plans allow.
            strata = (self.strata[0][items], self.strata[1])
        return _Engine(
            self.labels[items],
            [p[items] for p in self.scores],
            units,
            n_units,
            self.chosen,
            strata,
            self.threshold,
        )


def _point_values(
    engine: _Engine, n_units: int, shared: _kernels.UnitMeans | None = None
) -> dict[str, NDArray[np.float64]]:
    # Every group once: the full sample, computed by the very kernels the resamples use.
    ones = np.ones((1, n_units), np.int32)
    means = None if shared is None else shared(ones)
    return {m: v[:, 0].copy() for m, v in engine.compute(ones, None, means).items()}


def _share_means(engines: Sequence[_Engine]) -> _kernels.UnitMeans | None:
    """One :class:`~app.stats._kernels.UnitMeans` for the additive metrics of every engine.

    The engines are those of one pass (same items and units): their columns side by side, a
    metric of the labels alone once, and the unit sizes once. Each row of the shared product
    is summed as it would be alone, so the means equal each engine's own, at one product per
    chunk for them all. Sets each engine's ``columns``; ``None`` when none has any.
    """
    parts: list[NDArray[np.float64]] = []
    width = 0
    labels_only: dict[str, NDArray[np.intp]] = {}
    for engine in engines:
        if engine.totals is None:
            continue
        columns = np.empty(engine.totals.shape[1], dtype=np.intp)
        for metric, _, slots in engine.additive:
            for slot in slots:
                if not metric.per_detector and metric.name in labels_only:
                    columns[slot] = labels_only[metric.name]
                    continue
                at = np.arange(width, width + slot.stop - slot.start, dtype=np.intp)
                parts.append(engine.totals[:, slot])
                width += at.size
                columns[slot] = at
                if not metric.per_detector:
                    labels_only[metric.name] = at
        engine.columns = columns
    if not parts:
        return None
    return _kernels.UnitMeans(np.hstack(parts), engines[0].unit_sizes)


def sliced_group_bootstrap(
    y: ArrayLike,
    scores: ArrayLike | Sequence[ArrayLike],
    groups: ArrayLike,
    slices: ArrayLike,
    *,
    metrics: Sequence[str] = ("auroc", "auprc", "brier"),
    choice: ArrayLike | None = None,
    threshold: float = 0.5,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    n_threads: int | None = None,
) -> dict[Any, BootstrapResult]:
    """:func:`group_bootstrap` of each slice, every slice in one pass over the resamples.

    The resamples are stratified by slice: resample b draws, in each slice (sorted order), as
    many of the slice's groups as it has, with replacement, all from one generator (the b-th
    child stream of ``SeedSequence(seed)``; see :func:`stratified_multiplicities`).
    A group that occurs in two slices is one unit in each. So each slice is group-bootstrapped
    within itself, and replicate b of every slice comes from the same resample, which makes the
    mean of the slices' replicates b a replicate of their macro-average. Drawing once for all
    slices costs one generator per resample instead of one per resample and slice.

    Parameters
    ----------
    y, scores, groups, metrics, choice, threshold, resamples, seed, level, n_threads
        As for :func:`group_bootstrap`; ``scores`` of shape (n,) or (k, n).
    slices : array-like, shape (n,)
        Slice key of each item (any sortable scalar keys).

    Returns
    -------
    dict of slice key to BootstrapResult
        One result per slice present, in sorted key order; its point values are those of
        :func:`group_bootstrap` on the slice's items (computed alike), its ``seed`` the root
        ``seed`` of the shared draw.

    Raises
    ------
    ValueError
        As :func:`group_bootstrap`, or on malformed slice keys.

    """
    request = _Request.of(y, scores, metrics, choice, threshold)
    codes, n_slices = _validate.keys(slices, request.n, "slices")
    # Each slice's key, read at its first item (codes follow the sorted order of the keys).
    first = np.unique(codes, return_index=True)[1]
    keys = [np.asarray(slices, dtype=object).reshape(-1)[i] for i in first]
    # Group codes follow the sorted keys, so renumbering a slice's codes keeps that order: the
    # units of group_bootstrap on the slice's items alone.
    all_units, _ = _validate.keys(groups, request.n, "groups")
    resamples = _validate.resample_count(resamples)
    seed = _validate.seed_value(seed)
    level = _validate.confidence_level(level)
    engines, sizes, members = [], [], []
    for s in range(n_slices):
        inside = codes == s
        distinct, units = np.unique(all_units[inside], return_inverse=True)
        engines.append(request.engine(inside, units.astype(np.intp), int(distinct.size)))
        sizes.append(int(distinct.size))
        members.append(int(inside.sum()))
    offsets = np.cumsum([0, *sizes])
    points = [_point_values(engine, m) for engine, m in zip(engines, sizes, strict=True)]
    replicates = [
        {m: np.full((engine.k, resamples), np.nan) for m in request.wanted} for engine in engines
    ]

    def store(start: int, stop: int, weights: NDArray[np.int32]) -> None:
        for s, engine in enumerate(engines):
            part = weights[:, offsets[s] : offsets[s + 1]]
            for name, values in engine.compute(part).items():
                replicates[s][name][:, start:stop] = values

    _for_each_chunk(
        store,
        seed,
        resamples,
        sizes,
        int(offsets[-1]),  # working arrays per unit and score level, not per item
        threads=_thread_count(n_threads),
        chunk_size=None,
    )
    return {
        keys[s]: BootstrapResult(
            request.wanted, points[s], replicates[s], level, seed, sizes[s], members[s]
        )
        for s in range(n_slices)
    }


def stack_results(
    first: BootstrapResult, second: BootstrapResult, metrics: Sequence[str]
) -> BootstrapResult:
    """Two one-detector bootstraps of the same items and resamples as one of two detectors.

    Parameters
    ----------
    first, second : BootstrapResult
        Bootstraps of one detector each, on the same items, groups, seed and resamples.
    metrics : sequence of str
        Metrics both computed.

    Returns
    -------
    BootstrapResult
        Detector 0 is ``first``, 1 is ``second``; ``difference`` pairs them.

    Raises
    ------
    ValueError
        If the two were not drawn alike (seed, resamples, groups, items or level differ).

    """
    alike = ("seed", "n_groups", "n_items", "level", "resamples")
    if any(getattr(first, a) != getattr(second, a) for a in alike):
        raise ValueError("the two bootstraps were not drawn on the same resamples")
    return BootstrapResult(
        tuple(metrics),
        {m: np.concatenate([first.point[m][:1], second.point[m][:1]]) for m in metrics},
        {m: np.vstack([first.replicates[m][:1], second.replicates[m][:1]]) for m in metrics},
        first.level,
        first.seed,
        first.n_groups,
        first.n_items,
    )


def group_bootstrap_answers(
    labels: ArrayLike,
    answers: Sequence[ArrayLike],
    groups: ArrayLike,
    n_classes: int,
    *,
    metrics: Sequence[str] = ("answer_accuracy",),
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    n_threads: int | None = None,
) -> BootstrapResult:
    """Answer metrics of one or more models on the same group-bootstrap resamples.

    The resamples are those of :func:`group_bootstrap` with the same seed and groups.

    Parameters
    ----------
    labels : array-like of int, shape (n,)
        Class index of each item's label, in ``0 .. n_classes - 1``.
    answers : sequence of k array-likes of int, shape (n,)
        Each model's answer per item: a class index, or a negative number for an answer that
        names no class (a wrong answer). Every model answered every item.
    groups : array-like, shape (n,)
        Group key of each item; the resampling unit.
    n_classes : int
        Number of classes K (1 for graded free-text answers, coded 0 = right, -1 = wrong).
    metrics : sequence of str
        Answer metrics of the registry (:data:`app.stats.registry.ANSWER_METRICS`); those
        that need classes require ``n_classes >= 2``.
    resamples, seed, level, n_threads
        As for :func:`group_bootstrap`.

    Returns
    -------
    BootstrapResult
        Point values and replicates of shape (k,) and (k, B) per metric.

    Raises
    ------
    ValueError
        On malformed inputs or metrics that are not answer metrics (or need classes).

    """
    y = np.asarray(labels, dtype=np.intp)
    rows = [np.asarray(a, dtype=np.intp) for a in answers]
    if y.ndim != 1 or y.size == 0 or not rows:
        raise ValueError("labels must be a non-empty (n,) array, with at least one model")
    if any(a.shape != y.shape for a in rows):
        raise ValueError(f"every answer array must have shape {y.shape}")
    if (
        n_classes < 1
        or y.min() < 0
        or y.max() >= n_classes
        or any(a.max() >= n_classes for a in rows)
    ):
        raise ValueError(f"labels and answers must be class indices below n_classes={n_classes}")
    wanted = tuple(dict.fromkeys(metrics))
    chosen = []
    for name in wanted:
        metric = REGISTRY.get(name)
        if metric is None or not metric.on_answers:
            raise ValueError(f"{name!r} is not an answer metric")
        if Need.CLASSES in metric.needs and n_classes < 2:
            raise ValueError(f"{name} needs answers that name classes")
        chosen.append(metric)
    units, n_units = _validate.keys(groups, y.size, "groups", reference="labels")
    resamples = _validate.resample_count(resamples)
    seed = _validate.seed_value(seed)
    level = _validate.confidence_level(level)
    blocks, slots = [], []
    width = 0
    for metric in chosen:
        assert isinstance(metric.kernel, Categorical)
        per_model = []
        for a in rows:
            block = metric.kernel.columns(y, a, n_classes)
            per_model.append(slice(width, width + block.shape[1]))
            width += block.shape[1]
            blocks.append(block)
        slots.append(per_model)
    sizes = np.bincount(units, minlength=n_units).astype(np.int64)
    unit_means = _kernels.UnitMeans(_kernels.unit_totals(np.hstack(blocks), units, n_units), sizes)

    def compute(weights: NDArray[np.integer]) -> dict[str, NDArray[np.float64]]:
        means = unit_means(weights)
        return {
            metric.name: np.stack([metric.kernel.reduce(means[:, s]) for s in per_model])  # type: ignore[union-attr]
            for metric, per_model in zip(chosen, slots, strict=True)
        }

    point = {m: v[:, 0].copy() for m, v in compute(np.ones((1, n_units), np.int32)).items()}
    replicates = {m: np.full((len(rows), resamples), np.nan) for m in wanted}

    def store(start: int, stop: int, weights: NDArray[np.int32]) -> None:
        for name, values in compute(weights).items():
            replicates[name][:, start:stop] = values

    _for_each_chunk(
        store, seed, resamples, n_units, n_units, threads=_thread_count(n_threads), chunk_size=None
    )
    return BootstrapResult(wanted, point, replicates, level, seed, n_units, int(y.size))


def bootstrap_mean(
    values: ArrayLike,
    groups: ArrayLike,
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    n_threads: int | None = None,
) -> Estimate:
    """Mean of item values (e.g. the flip indicator, giving the flip rate) with its interval.

    Parameters
    ----------
    values : array-like of float, shape (n,)
        Finite item values.
    groups : array-like, shape (n,)
        Group key of each item; the resampling unit.
    resamples : int
        Number of resamples B.
    seed : int
        Root seed; the resamples equal those of ``group_bootstrap`` with the same seed/groups.
    level : float
        Interval coverage.
    n_threads : int, optional
        Worker threads; results do not depend on it.

    Returns
    -------
    Estimate

    """
    x = _validate.scores(values, name="values")
    units, n_units = _validate.keys(groups, x.size, "groups", reference="values")
    resamples = _validate.resample_count(resamples)
    seed = _validate.seed_value(seed)
    level = _validate.confidence_level(level)
    sizes = np.bincount(units, minlength=n_units).astype(np.int64)
    unit_means = _kernels.UnitMeans(_kernels.unit_totals(x[:, None], units, n_units), sizes)
    replicates = np.full(resamples, np.nan)

    def store(start: int, stop: int, weights: NDArray[np.int32]) -> None:
        replicates[start:stop] = unit_means(weights)[:, 0]

    _for_each_chunk(
        store, seed, resamples, n_units, n_units, threads=_thread_count(n_threads), chunk_size=None
    )
    return Estimate.of(float(x.mean()), percentile_interval(replicates, level), resamples, n_units)


@dataclass(frozen=True)
class RatioResult:
    """Ratios of sums (rates such as a flip rate among some pairs) and their replicates.

    Attributes
    ----------
    point : ndarray of float64, shape (k,)
        ``sum(numerator) / sum(denominator)`` of each column on the full data; NaN where the
        denominator sums to 0.
    replicates : ndarray of float64, shape (k, B)
        The same ratio in each resample; NaN where its denominator is 0 in that resample.
    level : float
    n_groups : int

    """

    point: NDArray[np.float64]
    replicates: NDArray[np.float64]
    level: float
    n_groups: int

    @property
    def resamples(self) -> int:
        """Number of resamples B."""
        return int(self.replicates.shape[1])

    def estimate(self, column: int) -> Estimate:
        """Point value and percentile interval of ratio number ``column``."""
        interval = percentile_interval(self.replicates[column], self.level)
        return Estimate.of(
            _float_or_none(self.point[column]), interval, self.resamples, self.n_groups
        )

    def difference(self, first: int, second: int) -> Estimate:
        """Paired difference ``first - second`` of two ratios over the same resamples.

        A resample counts when both ratios are defined in it.
        """
        deltas = self.replicates[first] - self.replicates[second]
        point = self.point[first] - self.point[second]
        interval = percentile_interval(deltas, self.level)
        return Estimate.of(_float_or_none(point), interval, self.resamples, self.n_groups)


def bootstrap_ratios(
    numerators: ArrayLike,
    denominators: ArrayLike,
    groups: ArrayLike,
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    n_threads: int | None = None,
) -> RatioResult:
    """Ratios of item sums, each with its group-bootstrap replicates, all on the same resamples.

    A rate over a subset of items (the flip rate among pairs whose AB choice was A) is the
    ratio of the sum of an item's hits to the sum of its indicator of the subset; a resample
    takes every item of each drawn group as often as the group was drawn. Every column sees
    the same resamples (those of :func:`bootstrap_mean` and :func:`group_bootstrap` with the
    same seed and groups), so differences between columns are paired.

    Parameters
    ----------
    numerators : array-like of float, shape (n, k)
        Each item's contribution to the numerator of each of k ratios.
    denominators : array-like of float, shape (n, k)
        Each item's non-negative contribution to each denominator.
    groups : array-like, shape (n,)
        Group key of each item; the resampling unit.
    resamples : int
        Number of resamples B.
    seed : int
        Root seed.
    level : float
        Interval coverage.
    n_threads : int, optional
        Worker threads; results do not depend on it.

    Returns
    -------
    RatioResult

    Raises
    ------
    ValueError
        On shapes that differ, non-finite values, a negative denominator or no items.

    """
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    if num.ndim != 2 or num.shape != den.shape or num.shape[0] == 0:
        raise ValueError(
            f"numerators {num.shape} and denominators {den.shape} must share a shape (n, k), n > 0"
        )
    if not (np.isfinite(num).all() and np.isfinite(den).all()):
        raise ValueError("numerators and denominators must be finite")
    if (den < 0).any():
        raise ValueError("denominators must be non-negative")
    n, k = num.shape
    units, n_units = _validate.keys(groups, n, "groups", reference="numerators")
    resamples = _validate.resample_count(resamples)
    seed = _validate.seed_value(seed)
    level = _validate.confidence_level(level)
    sizes = np.bincount(units, minlength=n_units).astype(np.int64)
    # Means over items of both columns: their ratio is the ratio of the sums (the item count
    # cancels), and UnitMeans sums in a fixed order, so replicates do not depend on chunking.
    unit_means = _kernels.UnitMeans(
        _kernels.unit_totals(np.hstack([num, den]), units, n_units), sizes
    )
    replicates = np.full((k, resamples), np.nan)

    def store(start: int, stop: int, weights: NDArray[np.int32]) -> None:
        means = unit_means(weights)
        replicates[:, start:stop] = _kernels.ratio(means[:, :k], means[:, k:]).T

    _for_each_chunk(
        store, seed, resamples, n_units, n_units, threads=_thread_count(n_threads), chunk_size=None
    )
    point = _kernels.ratio(num.sum(axis=0), den.sum(axis=0))
    return RatioResult(point, replicates, level, n_units)
