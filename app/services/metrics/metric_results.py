"""Materialised metrics: each request's report, plot data and drawn figures, kept in the store.

A metrics request (:class:`~app.services.metrics.metrics_query.MetricsQuery`) on one version of a
benchmark always computes the same numbers, so they are computed once and kept at two levels: this
process's :data:`~app.services.metrics.metrics_query.METRICS_CACHE`, then the ``metric_results``
table, which every server process and every restart reads. The version is :func:`result_version`: a
request on original labels reads only the evidence, so it is keyed on the benchmark's
``evidence_version``, which votes and adjudications leave alone (a review session on a big benchmark
does not recompute it after every vote); one on resolved labels is keyed on ``data_version``, which
every write bumps. A stored result is never served for data it was not computed on; the newest older
one is still there to show, marked stale, while a ``compute_metrics`` job computes the current one
(:mod:`app.services.jobs.compute_metrics`).

Reports are stored as JSON text: Python's float repr round-trips every float exactly, so a
stored value equals the direct computation bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labelled_items import data_key, get_detector, label_key
from app.services.evidence.payload_fields import payload_text
from app.services.metrics.answer_metrics import answer_report, compares_answers
from app.services.metrics.metrics_plots import (
    MetricsPlots,
    plot_data,
    plots_from_json,
    plots_to_json,
)
from app.services.metrics.metrics_query import METRICS_CACHE, MetricsQuery, load_metrics_data
from app.services.metrics.report import report_of
from app.services.table.facets import BenchmarkFacets
from app.sql.cache import VersionedCache
from app.sql.kept_results import keep_result
from app.tables import Benchmark, MetricResult

__all__ = [
    "INLINE_ITEMS",
    "Draw",
    "MetricsResult",
    "Progress",
    "check_request",
    "compute_result",
    "computes_inline",
    "labelled_count",
    "materialise",
    "params_key",
    "query_from_params",
    "query_params",
    "result_key",
    "result_version",
    "save_result",
    "stale_result",
    "stored_result",
]

INLINE_ITEMS = 50_000
"""Labelled items up to which a page computes a missing result itself; above, a job does."""

Draw = Callable[[MetricsPlots], dict[str, Any]]
"""Draws the plots as figures (the web layer's SVG), JSON-ready, to store beside the numbers."""

Progress = Callable[[int, int], None]
"""Called with (units done, units in all) as a computation goes."""


@dataclass(frozen=True)
class MetricsResult:
    """One request's numbers on one data version, as stored (or as about to be).

    Attributes
    ----------
    benchmark_id, params_key, data_version
        What the result is of (see :func:`params_key`).
    params : dict
        The request (:func:`query_params`).
    report : dict
        The report of :func:`app.services.metrics.report.report_of` (or the answer report), as read
        back from its JSON.
    plots_json : str, optional
        The plot data (curves already thinned), JSON text; ``None`` for an answer report.
    figures : dict, optional
        The plots as drawn (see :data:`Draw`); ``None`` when not drawn or nothing to draw.
    seconds : float
        Wall time of the computation.

    """

    benchmark_id: int
    params_key: str
    data_version: int
    params: dict[str, Any]
    report: dict[str, Any]
    plots_json: str | None
    figures: dict[str, Any] | None
    seconds: float

    @cached_property
    def plots(self) -> MetricsPlots | None:
        """The plot data (parsed on first use: a page with figures never needs it)."""
        return None if self.plots_json is None else plots_from_json(json.loads(self.plots_json))


def query_params(query: MetricsQuery) -> dict[str, Any]:
    """The request as JSON-ready parameters (a job's, a stored result's)."""
    out = asdict(query)
    out["detectors"] = None if query.detectors is None else list(query.detectors)
    return out


def query_from_params(params: dict[str, Any]) -> MetricsQuery:
    """The request :func:`query_params` wrote (checked again: :class:`InvalidInput`)."""
    detectors = params.get("detectors")
    return MetricsQuery(**{**params, "detectors": tuple(detectors) if detectors else None})


def params_key(bench: Benchmark, query: MetricsQuery) -> str:
    """The hash naming ``query`` on ``bench``, whatever its data version.

    ``k`` counts only for resolved labels (as in :func:`label_key`); the benchmark's creation
    time keeps a new benchmark from reading the results of a deleted one with its name.
    """
    params = query_params(query)
    params["k"] = label_key(query.labels, query.k)[1]
    params["created_at"] = str(bench.created_at)
    text = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def result_version(bench: Benchmark, query: MetricsQuery) -> int:
    """The version of ``bench`` that ``query``'s numbers depend on (stored as ``data_version``).

    ``evidence_version`` for original labels (review events leave the numbers as they are),
    ``data_version`` for resolved ones. A request's ``params_key`` holds its label mode, so the
    two counters never meet in one request's rows.
    """
    return bench.evidence_version if query.labels == "original" else bench.data_version


def _cache_key(session: Session, bench: Benchmark, query: MetricsQuery, key: str) -> Hashable:
    evidence = query.labels == "original"
    return ("metrics-result", *data_key(session, bench, evidence=evidence), key)


def result_key(session: Session, bench: Benchmark, query: MetricsQuery) -> Hashable:
    """The in-process cache key of ``query`` on the benchmark's current version."""
    return _cache_key(session, bench, query, params_key(bench, query))


def _jsonable(value: Any) -> Any:
    # numpy scalars that reach a report (counts, flags) become plain Python numbers.
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_jsonable, separators=(",", ":"))


def _result(row: MetricResult | Any, figures: bool = True) -> MetricsResult:
    return MetricsResult(
        benchmark_id=row.benchmark_id,
        params_key=row.params_key,
        data_version=row.data_version,
        params=dict(row.params),
        report=json.loads(row.report),
        plots_json=row.plots,
        figures=json.loads(row.figures) if figures and row.figures else None,
        seconds=row.compute_seconds,
    )


def stored_result(
    session: Session,
    bench: Benchmark,
    query: MetricsQuery,
    *,
    cache: VersionedCache | None = METRICS_CACHE,
) -> MetricsResult | None:
    """The result of ``query`` on the benchmark's current data version, if one was stored.

    Read from ``cache`` first, else from the table (and then kept in ``cache``).
    """
    key = params_key(bench, query)
    ckey = _cache_key(session, bench, query, key)
    if cache is not None and (hit := cache.peek(ckey)) is not None:
        return hit  # type: ignore[no-any-return]
    row = session.scalar(
        select(MetricResult).where(
            MetricResult.benchmark_id == bench.id,
            MetricResult.params_key == key,
            MetricResult.data_version == result_version(bench, query),
        )
    )
    if row is None:
        return None
    result = _result(row)
    if cache is not None:
        cache.put(ckey, result)
    return result


def stale_result(session: Session, bench: Benchmark, query: MetricsQuery) -> MetricsResult | None:
    """The newest stored result of ``query`` on an older data version of the benchmark."""
    row = session.scalar(
        select(MetricResult)
        .where(
            MetricResult.benchmark_id == bench.id,
            MetricResult.params_key == params_key(bench, query),
            MetricResult.data_version < result_version(bench, query),
        )
        .order_by(MetricResult.data_version.desc())
        .limit(1)
    )
    return None if row is None else _result(row)


def compute_result(
    session: Session,
    query: MetricsQuery,
    *,
    draw: Draw | None = None,
    progress: Progress | None = None,
) -> MetricsResult:
    """Compute ``query`` directly: the report, the thinned plot data and the drawn figures.

    Nothing is stored (:func:`save_result` does). ``progress`` hears of each detector's rows,
    of the judges and comparisons, and of each detector's plots.

    Raises
    ------
    NotFound, InvalidInput
        As :func:`app.services.metrics.report.report_for`.

    """
    started = time.perf_counter()
    bench = get_benchmark(session, query.benchmark)
    plots: MetricsPlots | None = None
    if compares_answers(bench, query.label):
        if progress is not None:
            progress(0, 1)
        report = answer_report(session, query)
        done, total = 1, 1
    else:
        data = load_metrics_data(session, query)
        total = 2 * len(data.detectors) + 1
        done = 0

        def tick() -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(done, total)

        if progress is not None:
            progress(0, total)
        report = report_of(session, data, on_detector=tick)
        tick()
        plots = plot_data(data, on_detector=tick)
    figures = draw(plots) if draw is not None and plots is not None else None
    plots_json = None if plots is None else _dumps(plots_to_json(plots))
    if progress is not None and done < total:
        progress(total, total)
    return MetricsResult(
        benchmark_id=bench.id,
        params_key=params_key(bench, query),
        # The version read with the data: a write since then makes this result stale, not wrong.
        data_version=result_version(bench, query),
        params=query_params(query),
        # Through JSON, so that this process serves what every other one reads from the store.
        report=json.loads(_dumps(report)),
        plots_json=plots_json,
        figures=None if figures is None else json.loads(_dumps(figures)),
        seconds=time.perf_counter() - started,
    )


def compute_unless_stored(
    session: Session,
    query: MetricsQuery,
    *,
    draw: Draw | None = None,
    progress: Progress | None = None,
) -> MetricsResult | None:
    """:func:`compute_result`, or None when the current version's result is already stored.

    What a job computing in the background does: another job, a page or the CLI may have
    stored the same request meanwhile.
    """
    bench = get_benchmark(session, query.benchmark)
    if stored_result(session, bench, query, cache=None) is not None:
        return None
    return compute_result(session, query, draw=draw, progress=progress)


def save_result(session: Session, result: MetricsResult) -> None:
    """Store ``result``; a result already stored for its request and version stays as it is.

    One ``INSERT ... ON CONFLICT DO NOTHING``: two processes that computed the same request
    side by side both succeed, and the numbers they computed are the same. Results of the
    request on older data versions go: they were kept only to be shown, marked stale, until
    this one was computed.
    """
    values = {
        "benchmark_id": result.benchmark_id,
        "params_key": result.params_key,
        "data_version": result.data_version,
        "params": result.params,
        "report": _dumps(result.report),
        "plots": result.plots_json,
        "figures": None if result.figures is None else _dumps(result.figures),
        "compute_seconds": result.seconds,
    }
    keep_result(
        session,
        MetricResult,
        values,
        version="data_version",
        scope=("benchmark_id", "params_key"),
        unique=("benchmark_id", "params_key", "data_version"),
    )


def materialise(
    session: Session,
    bench: Benchmark,
    query: MetricsQuery,
    *,
    save: Callable[[MetricsResult], None],
    draw: Draw | None = None,
    cache: VersionedCache = METRICS_CACHE,
) -> MetricsResult:
    """The result of ``query``: the stored one, else computed here and handed to ``save``.

    Concurrent callers in one process wait for one computation (``cache`` is single-flight);
    ``save`` stores the result (:func:`save_result`, in whatever transaction the caller
    writes with).
    """
    found = stored_result(session, bench, query, cache=cache)
    if found is not None:
        return found

    def compute() -> MetricsResult:
        result = compute_result(session, query, draw=draw)
        save(result)
        return result

    return cache.get_or_compute(result_key(session, bench, query), compute)


def labelled_count(facets: BenchmarkFacets, label: str) -> int:
    """Instances with a current value of ``label``; 0 for a label set the benchmark lacks.

    (So a request for an unknown label set is computed inline, and refused there.)
    """
    facet = facets.label_set(label)
    if facet is None:
        return 0
    return sum(v.count for v in facet.values if v.value is not None)


def check_request(session: Session, query: MetricsQuery) -> None:
    """Refuse now what a job would refuse: an unknown detector, a malformed slice field.

    Raises
    ------
    NotFound
        Unknown detector.
    InvalidInput
        A slice field that is not a plain payload field name.

    """
    for name in query.detectors or ():
        get_detector(session, name)
    if query.slice_field is not None:
        try:
            payload_text(session.get_bind().dialect.name, query.slice_field)
        except ValueError as exc:
            raise InvalidInput(str(exc), field="slice") from None


def computes_inline(
    facets: BenchmarkFacets, query: MetricsQuery, limit: int = INLINE_ITEMS
) -> bool:
    """Whether a page computes a missing result itself (small), or leaves it to a job."""
    return labelled_count(facets, query.label) <= limit
