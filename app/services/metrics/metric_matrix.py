"""The metric matrix: detectors x slices (+ macro-average) against one label set, with intervals.

Its columns are the metric registry's reported metrics (:data:`app.stats.registry.REPORTED`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from app.services.evidence.detectors import REVIEW_RANKING_KINDS
from app.services.metrics.metrics_query import METRICS_CACHE, MetricsData, Sample
from app.sql.cache import VersionedCache
from app.stats.bootstrap import (
    BootstrapResult,
    Estimate,
    group_bootstrap,
    group_bootstraps,
    percentile_interval,
    sliced_group_bootstrap,
    too_few_groups,
)
from app.stats.registry import INTERVAL, REPORTED, Metric, applicable
from app.tables import Detector

__all__ = [
    "HEADLINE_METRICS",
    "INTERVAL_METRICS",
    "MACRO",
    "MATRIX_METRICS",
    "Cell",
    "MetricRow",
    "macro_row",
    "matrix_rows",
    "ranks_for_review",
    "slice_cells",
    "slice_seed",
    "slices_seed",
]

MATRIX_METRICS: tuple[Metric, ...] = REPORTED
"""The matrix's metrics in column order (registry records: name, title, interval, ...)."""

INTERVAL_METRICS: tuple[str, ...] = tuple(m.name for m in INTERVAL)
"""Metrics reported with a group-bootstrap interval (prevalence is reported as a point)."""

HEADLINE_METRICS: tuple[Metric, ...] = tuple(m for m in REPORTED if m.headline)
"""The metrics of compact before/after tables."""

MACRO = "(macro-average)"
"""The ``slice`` value of the macro-average row; the all-items row has ``slice = None``."""


@dataclass(frozen=True)
class MetricRow:
    """One row of the matrix: a detector on all items, one slice, or the macro-average.

    ``values`` holds each of :data:`MATRIX_METRICS` (``None`` when undefined or not
    applicable: AUROC with one class, Brier of non-probability scores, choice-matched AUROC
    outside flip label sets); ``intervals`` the 95% percentile interval of each of
    :data:`INTERVAL_METRICS`.
    """

    detector: str
    slice: str | None
    kind: str  # "all" | "slice" | "macro"
    n: int
    n_groups: int
    values: dict[str, float | None]
    intervals: dict[str, list[float] | None]
    valid_resamples: dict[str, int] = field(default_factory=dict)
    # The metrics of this row's table: the matrix's, or the answer metrics of models.
    columns: tuple[Metric, ...] = field(default=MATRIX_METRICS, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """The JSON row of ``appellate metrics --json``."""
        out: dict[str, Any] = {"detector": self.detector, "slice": self.slice, "n": self.n}
        for metric in self.columns:
            out[metric.name] = self.values.get(metric.name)
            if metric.interval:
                out[f"{metric.name}_ci"] = self.intervals.get(metric.name)
                if self.interval_reason is not None:
                    out[f"{metric.name}_ci_reason"] = self.interval_reason
        return out

    @property
    def interval_reason(self) -> str | None:
        """Why this row has no intervals: too few groups (``too_few_groups``), else None."""
        return too_few_groups(self.n_groups)


@dataclass
class Cell:
    """One bootstrap of one detector on one subset, kept for the macro-average."""

    row: MetricRow
    replicates: dict[str, NDArray[np.float64]]
    result: BootstrapResult | None = None


def ranks_for_review(detector: Detector) -> bool:
    """Whether a detector's scores rank items for review (rankers, critics): top-k metrics."""
    return detector.kind in REVIEW_RANKING_KINDS


def _wanted(detector: Detector, sample: Sample) -> tuple[Metric, ...]:
    """The matrix metrics that apply to the detector's scores on ``sample``."""
    (p,) = sample.scores
    return applicable(
        MATRIX_METRICS, p, strata=sample.strata is not None, ranking=ranks_for_review(detector)
    )


def _empty(name: str, slice_name: str | None, kind: str) -> Cell:
    """The cell of a subset the detector scored no item of."""
    values: dict[str, float | None] = dict.fromkeys(m.name for m in MATRIX_METRICS)
    intervals: dict[str, list[float] | None] = dict.fromkeys(INTERVAL_METRICS)
    return Cell(MetricRow(name, slice_name, kind, 0, 0, values, intervals), {})


def _evaluate(
    detector: Detector,
    slice_name: str | None,
    kind: str,
    sample: Sample,
    resamples: int,
    seed: int,
) -> Cell:
    if sample.n == 0:
        return _empty(detector.name, slice_name, kind)
    wanted = _wanted(detector, sample)
    result = group_bootstrap(
        sample.y,
        sample.scores[0],
        sample.groups,
        metrics=[m.name for m in wanted],
        choice=sample.strata,
        resamples=resamples,
        seed=seed,
    )
    return _cell(detector.name, slice_name, kind, wanted, result)


def _cell(
    name: str,
    slice_name: str | None,
    kind: str,
    wanted: tuple[Metric, ...],
    result: BootstrapResult,
) -> Cell:
    """The row and kept replicates of one bootstrap of one detector on one subset."""
    values: dict[str, float | None] = dict.fromkeys(m.name for m in MATRIX_METRICS)
    intervals: dict[str, list[float] | None] = dict.fromkeys(INTERVAL_METRICS)
    valid: dict[str, int] = {}
    for metric in wanted:
        estimate = result.estimate(metric.name)
        values[metric.name] = estimate.value
        if metric.interval:
            intervals[metric.name], valid[metric.name] = estimate.ci, estimate.valid
    row = MetricRow(
        name, slice_name, kind, result.n_items, result.n_groups, values, intervals, valid
    )
    replicates = {m.name: result.replicates[m.name][0] for m in wanted if m.interval}
    return Cell(row, replicates, result)


def macro_row(
    detector: str, cells: list[Cell], columns: tuple[Metric, ...] = MATRIX_METRICS
) -> MetricRow:
    """Mean over slices of each metric defined there; the interval averages slice replicates.

    Each slice is resampled within itself (a bootstrap stratified by slice), so replicate b of
    the macro-average is the mean of the slices' replicates b; a resample where any
    contributing slice is undefined is dropped.
    """
    values: dict[str, float | None] = {}
    intervals: dict[str, list[float] | None] = {}
    valid: dict[str, int] = {}
    for metric in columns:
        name = metric.name
        defined = [c for c in cells if c.row.values.get(name) is not None]
        values[name] = float(np.mean([c.row.values[name] for c in defined])) if defined else None
        if not metric.interval:
            continue
        intervals[name] = None
        if defined:
            interval = percentile_interval(np.mean([c.replicates[name] for c in defined], axis=0))
            estimate = Estimate.of(values[name], interval, 0, sum(c.row.n_groups for c in defined))
            intervals[name], valid[name] = estimate.ci, estimate.valid
    n = sum(c.row.n for c in cells)
    n_groups = sum(c.row.n_groups for c in cells)
    return MetricRow(detector, MACRO, "macro", n, n_groups, values, intervals, valid, columns)


def slice_seed(seed: int, index: int) -> int:
    """The seed of slice ``index`` of a request seeded with ``seed`` (answer metrics)."""
    # Independent streams per slice: equal seeds would draw correlated resamples across slices.
    return int(np.random.SeedSequence([seed, index + 1]).generate_state(1)[0])


def slices_seed(seed: int) -> int:
    """The seed of the one stratified draw of every slice of a request seeded with ``seed``."""
    # A stream apart from the all-items draw's (``seed`` itself) and from any slice_seed.
    return int(np.random.SeedSequence([seed, 0]).generate_state(1)[0])


def slice_cells(
    detector: Detector, sample: Sample, names: list[str], resamples: int, seed: int
) -> list[Cell]:
    """The detector's cell of each of ``names`` (slice values), from one stratified pass.

    Every slice is group-bootstrapped within itself on the same resamples
    (:func:`app.stats.bootstrap.sliced_group_bootstrap` seeded with :func:`slices_seed`); a
    slice the detector scored no item of is an empty cell. The metrics are those that apply to
    the detector's scores on all of ``sample``, so every slice has the same columns.
    """
    assert sample.slices is not None
    if sample.n == 0:
        return [_empty(detector.name, name, "slice") for name in names]
    wanted = _wanted(detector, sample)
    results = sliced_group_bootstrap(
        sample.y,
        sample.scores[0],
        sample.groups,
        sample.slices,
        metrics=[m.name for m in wanted],
        choice=sample.strata,
        resamples=resamples,
        seed=slices_seed(seed),
    )
    return [
        _cell(detector.name, name, "slice", wanted, results[name])
        if name in results
        else _empty(detector.name, name, "slice")
        for name in names
    ]


def _share_bootstraps(data: MetricsData, detectors: Sequence[Detector]) -> None:
    """Bootstrap the detectors that scored the same items on them in one pass, into ``data``.

    One draw of the resamples serves them all (at 250,000 groups the draw costs as much as a
    detector's kernels); each result equals the detector's own bootstrap
    (:func:`app.stats.bootstrap.group_bootstraps`), and waits in ``data.bootstraps``.
    """
    by_items: dict[bytes, list[Detector]] = {}
    for detector in detectors:
        scored = np.packbits(~np.isnan(data.scores(detector))).tobytes()
        by_items.setdefault(scored, []).append(detector)
    for same in by_items.values():
        if len(same) < 2:
            continue
        samples = [data.sample(d) for d in same]
        if samples[0].n == 0:
            continue
        first = samples[0]
        results = group_bootstraps(
            first.y,
            [s.scores[0] for s in samples],
            first.groups,
            [[m.name for m in _wanted(d, s)] for d, s in zip(same, samples, strict=True)],
            choice=first.strata,
            resamples=data.query.resamples,
            seed=data.query.seed,
        )
        data.bootstraps.update((d.id, r) for d, r in zip(same, results, strict=True))


def _detector_rows(data: MetricsData, detector: Detector) -> tuple[MetricRow, ...]:
    resamples, seed = data.query.resamples, data.query.seed
    sample = data.sample(detector)
    shared = data.bootstraps.get(detector.id)
    if shared is not None and sample.n > 0:
        every = _cell(detector.name, None, "all", _wanted(detector, sample), shared)
    else:
        every = _evaluate(detector, None, "all", sample, resamples, seed)
    if every.result is not None:
        data.bootstraps[detector.id] = every.result
    rows = [every.row]
    if sample.slices is None or data.items.slices is None:
        return tuple(rows)
    cells = slice_cells(detector, sample, sorted(set(data.items.slices)), resamples, seed)
    rows.extend(cell.row for cell in cells)
    rows.append(macro_row(detector.name, cells))
    return tuple(rows)


def matrix_rows(
    data: MetricsData,
    cache: VersionedCache | None = METRICS_CACHE,
    on_detector: Callable[[], None] | None = None,
) -> list[MetricRow]:
    """The matrix rows of the request's detectors, detector by detector.

    For each detector: one row over all items it scored (``slice=None``), and with a slice
    field one row per slice value (sorted; ``"(none)"`` when the field is absent) and a
    macro-average row (``slice=MACRO``). Scores are read as P(positive class) of the target;
    the group is ``Instance.group_key``. Metrics that need strata (choice-matched AUROC) are
    computed for ``flip:<judge>`` label sets, stratified by that judge's AB choice; the slices
    are resampled together, each within itself, from a seed derived from ``seed``
    (:func:`slice_cells`).

    Parameters
    ----------
    data : MetricsData
        The loaded request.
    cache : VersionedCache, optional
        Memo of each detector's rows, keyed on the data version, target, label mode, detector,
        slice field, resamples and seed; ``None`` disables it.
    on_detector : callable, optional
        Called after each detector's rows (job progress).

    Returns
    -------
    list of MetricRow

    """
    query = data.query
    keys: dict[int, Hashable] = {
        detector.id: (
            "metric-rows",
            *data.key,
            detector.id,
            query.slice_field,
            query.resamples,
            query.seed,
        )
        for detector in data.detectors
    }
    _share_bootstraps(data, [d for d in data.detectors if cache is None or keys[d.id] not in cache])
    rows: list[MetricRow] = []
    for detector in data.detectors:

        def compute(detector: Detector = detector) -> tuple[MetricRow, ...]:
            return _detector_rows(data, detector)

        key = keys[detector.id]
        rows.extend(compute() if cache is None else cache.get_or_compute(key, compute))
        if on_detector is not None:
            on_detector()
    return rows
