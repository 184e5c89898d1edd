"""The ``warm_up`` job kind: compute what a benchmark's first visitor would otherwise wait for.

Queued by an import that leaves a big benchmark (at least :data:`WARM_UP_FROM` instances), or
on demand. It keeps, per evidence version, what a cold read goes row by row for:

- the facets (label sets, judges, detectors, slices) a server reads at start-up;
- each label set's original-label columns and each scored detector's scores (what every
  metrics request and disagreement list reads first);
- the table's order sorted by each scored detector's score, highest first (a header click);
- the headline metrics of the default request, every scored detector against the default
  label set, so the metrics page is served from the store instead of queueing a job;
- the disagreements page's opening list, where the benchmark has one (its default ranker).

A restart changes none of it: the next server finds them in the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labelled_items import (
    get_detector,
    label_columns_name,
    read_label_columns,
    read_score_arrays,
    scores_name,
)
from app.services.evidence.labels import benchmark_label
from app.services.jobs.kind import JobLink, JobParams, enqueue, job_kind
from app.services.metrics.metrics_query import MetricsQuery
from app.services.table.facets import (
    BenchmarkFacets,
    benchmark_facets,
    facets_kept,
    stored_facets,
    worth_keeping,
)
from app.services.table.instance_filter import InstanceFilter
from app.services.table.instance_sort import SortField, TableSort
from app.services.table.table_order import KEEP_ORDER_FROM, read_order, resolved_order_name
from app.sql.kept_arrays import Arrays
from app.tables import Benchmark, Instance, Job, JobStatus

WARM_UP_FROM = KEEP_ORDER_FROM
"""An import leaving a benchmark of at least this many instances queues its warm-up: below it a
cold read takes well under a second."""

KeptRead = tuple[str, Callable[[Session, Benchmark], Arrays]]
"""One array set the warm-up keeps: its kept name and how to read it from the rows."""


@job_kind
@dataclass(frozen=True)
class WarmUpParams(JobParams):
    """Which benchmark to prepare, and the resamples of its headline metrics."""

    kind = "warm_up"
    title = "Prepare a benchmark's first views"

    benchmark: str
    resamples: int = MetricsQuery.resamples

    def validate(self) -> None:
        """At least one resample (an interval needs some)."""
        if self.resamples < 1:
            raise InvalidInput("must be at least 1", field="resamples")

    def check(self, session: Session) -> None:
        """The benchmark exists."""
        get_benchmark(session, self.benchmark)

    def headline(self, session: Session) -> MetricsQuery:
        """The metrics page's default request: every detector, the default label set."""
        bench = get_benchmark(session, self.benchmark)
        label = benchmark_label(session, bench.id, None)
        return MetricsQuery(self.benchmark, label=label, resamples=self.resamples)

    def kept_reads(self, session: Session) -> list[KeptRead]:
        """The arrays to keep: label columns, detector scores, then sorted table orders."""
        facets = current_facets(session, get_benchmark(session, self.benchmark))
        reads: list[KeptRead] = []
        for label_set in facets.label_sets:
            reads.append(
                (
                    label_columns_name(label_set.name),
                    lambda s, b, n=label_set.name: read_label_columns(s, b, n).to_arrays(),
                )
            )
        for scored in facets.scored_detectors:
            detector = get_detector(session, scored.name)
            reads.append(
                (scores_name(detector.id), lambda s, b, d=detector: read_score_arrays(s, b, d))
            )
        if facets.summary.instances >= KEEP_ORDER_FROM:
            for scored in facets.scored_detectors:
                sort = TableSort(field=SortField.score, name=scored.name, descending=True)

                def order(s: Session, b: Benchmark, sort: TableSort = sort) -> Arrays:
                    # The unfiltered table: what a click on a score column header shows.
                    return {"ids": read_order(s, current_facets(s, b), InstanceFilter(), sort)}

                reads.append((resolved_order_name(facets, InstanceFilter(), sort), order))
        return reads

    def facets_to_keep(self, session: Session) -> tuple[Benchmark, BenchmarkFacets] | None:
        """The benchmark and its facets where they are worth keeping and not kept yet."""
        bench = get_benchmark(session, self.benchmark)
        if facets_kept(session, bench):
            return None
        facets = benchmark_facets(session, bench, None)
        return (bench, facets) if worth_keeping(facets) else None

    def describe(self) -> str:
        """E.g. "Prepare the first views of mmlu-redux: kept columns, headline metrics"."""
        return (
            f"Prepare the first views of {self.benchmark}: kept label columns, scores and "
            "sorted orders, headline metrics, opening disagreement list"
        )

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The metrics page it prepared."""
        return [JobLink(f"Metrics of {self.benchmark}", "metrics", self.benchmark)]


def current_facets(session: Session, bench: Benchmark) -> BenchmarkFacets:
    """``bench``'s facets: the kept ones of its evidence version, else scanned."""
    return stored_facets(session, bench) or benchmark_facets(session, bench, None)


def queue_warm_up(session: Session, benchmark: str) -> Job | None:
    """Queue ``benchmark``'s warm-up after an import: where it is big and none is waiting.

    Called in the import's own transaction, so the job exists exactly when the import does. A
    warm-up already queued (not started) for the benchmark will read what this import wrote;
    one already running may have read before it, so a new one is queued beside it.
    """
    bench = get_benchmark(session, benchmark)
    count = session.scalar(select(func.count(Instance.id)).where(Instance.benchmark_id == bench.id))
    if (count or 0) < WARM_UP_FROM:
        return None
    waiting = session.scalars(
        select(Job.params).where(
            Job.kind == WarmUpParams.kind, Job.status == JobStatus.queued.value
        )
    )
    if any(params.get("benchmark") == benchmark for params in waiting):
        return None
    return enqueue(session, WarmUpParams(benchmark))
