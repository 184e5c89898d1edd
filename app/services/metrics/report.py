"""Metrics reports: the matrix, judge summaries and comparisons of one request, assembled.

The entry points build one :class:`~app.services.metrics.metrics_query.MetricsQuery`, load its data
once and hand that to every part. The shared readers are re-exported here for their callers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Unpack

from sqlalchemy.orm import Session

from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.binary_target import KNOWN_TARGETS, BinaryTarget, binary_target
from app.services.evidence.labelled_items import (
    LabelledItems,
    detector_scores,
    get_detector,
    load_labelled,
)
from app.services.metrics.answer_metrics import answer_report, compares_answers
from app.services.metrics.comparisons import comparisons, default_pairs
from app.services.metrics.judge_summary import judge_summaries_of
from app.services.metrics.metric_matrix import INTERVAL_METRICS, MACRO, MetricRow, matrix_rows
from app.services.metrics.metrics_query import (
    METRICS_CACHE,
    MetricsData,
    MetricsQuery,
    QueryOptions,
    load_metrics_data,
    metrics_query,
)
from app.sql.cache import VersionedCache

# The readers and names callers have imported from here since before the split.
__all__ = [
    "INTERVAL_METRICS",
    "MACRO",
    "METRICS_CACHE",
    "BinaryTarget",
    "LabelledItems",
    "MetricRow",
    "binary_target",
    "detector_scores",
    "get_detector",
    "load_labelled",
    "metric_rows",
    "metrics_report",
    "report_for",
    "report_of",
]


def metric_rows(
    session: Session,
    benchmark: str,
    label: str = "reference",
    detectors: Sequence[str] | None = None,
    *,
    cache: VersionedCache | None = METRICS_CACHE,
    **options: Unpack[QueryOptions],
) -> tuple[BinaryTarget, list[MetricRow]]:
    """Metric rows of detectors on a benchmark against a label set, with group-bootstrap CIs.

    See :func:`app.services.metrics.metric_matrix.matrix_rows` for the rows and
    :func:`~app.services.metrics.metrics_query.metrics_query` for the parameters (``options`` are
    ``slice_field``, ``positive``, ``resamples``, ``seed``, ``labels`` and ``k``; ``detectors``
    default to every detector with scores on the benchmark); ``cache`` memoises each
    detector's rows (``None`` disables it).

    Returns
    -------
    (BinaryTarget, list of MetricRow)
        The target rule used and the rows, detector by detector.

    Raises
    ------
    NotFound
        Unknown benchmark, label set or detector.
    InvalidInput
        Label set not binary, bad slice field, resamples, seed, labels or k.

    """
    data = load_metrics_data(session, metrics_query(benchmark, label, detectors, **options))
    return data.target, matrix_rows(data, cache)


def report_of(
    session: Session, data: MetricsData, on_detector: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The metric matrix, judge summaries and comparisons of a loaded request, JSON-ready.

    Judges are checked against the request's label set when it is an A/B label set (e.g. a
    corrected reference), else against ``reference``, with the request's label mode.
    ``on_detector`` is called after each detector's metric rows (job progress).

    Returns
    -------
    dict
        ``benchmark``, ``label``, ``labels``, ``k``, ``positive``, ``negative``,
        ``target_rule``, ``slice_field``, ``resamples``, ``seed``, ``data_version``,
        ``rows`` (see :meth:`MetricRow.as_dict`) and ``judges`` (see
        :meth:`app.services.metrics.judge_summary.JudgeSummary.as_dict`), ``comparisons`` (paired
        probe-minus-baseline differences) and ``constant_predictors`` (see
        :func:`app.services.metrics.comparisons.comparisons`).

    """
    query, target = data.query, data.target
    rows = matrix_rows(data, on_detector=on_detector)
    reference = (
        query.label if (target.positive, target.negative) == KNOWN_TARGETS[0] else "reference"
    )
    judges = judge_summaries_of(session, data, reference)
    shown = [d.name for d in data.detectors]
    compared = comparisons(session, data, default_pairs(shown), shown)
    return {
        "benchmark": query.benchmark,
        "label": query.label,
        "labels": query.labels,
        "k": query.k,
        "positive": target.positive,
        "negative": target.negative,
        "target_rule": target.rule,
        "slice_field": query.slice_field,
        "resamples": query.resamples,
        "seed": query.seed,
        "data_version": data.benchmark.data_version,
        "rows": [row.as_dict() for row in rows],
        "judges": [judge.as_dict() for judge in judges],
        "comparisons": compared["pairs"],
        "constant_predictors": compared["constant_predictors"],
    }


def metrics_report(
    session: Session,
    benchmark: str,
    label: str = "reference",
    detectors: Sequence[str] | None = None,
    **options: Unpack[QueryOptions],
) -> dict[str, Any]:
    """:func:`report_of` the request these parameters describe (CLI and tests).

    The parameters are those of :func:`metric_rows`; ``labels`` and ``k`` choose the original or the
    resolved labels (see :func:`~app.services.evidence.labelled_items.load_labelled`) for every part
    of the report alike.
    """
    return report_for(session, metrics_query(benchmark, label, detectors, **options))


def report_for(session: Session, query: MetricsQuery) -> dict[str, Any]:
    """:func:`report_of` ``query``, its labelled items read once (API and CLI).

    On a choice or answer benchmark against ``reference`` the report is about the models'
    answers instead (:func:`app.services.metrics.answer_metrics.answer_report`).
    """
    if compares_answers(get_benchmark(session, query.benchmark), query.label):
        return answer_report(session, query)
    return report_of(session, load_metrics_data(session, query))
