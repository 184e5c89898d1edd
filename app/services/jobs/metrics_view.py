"""Which numbers a metrics request shows: stored, computed now, or a job's (stale meanwhile).

The one place that decides, for the metrics page, its JSON twin and the queue's
before-you-accept section. The benchmark is looked up once and passed down.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.benchmarks import get_benchmark
from app.services.jobs.compute_metrics import compute_job, latest_compute_job
from app.services.metrics.metric_results import (
    Draw,
    MetricsResult,
    check_request,
    computes_inline,
    materialise,
    save_result,
    stale_result,
    stored_result,
)
from app.services.metrics.metrics_query import MetricsQuery
from app.services.table.facets import BenchmarkFacets, benchmark_facets
from app.sql.cache import VersionedCache
from app.tables import Benchmark, Job


class Way(StrEnum):
    """How a request's current numbers are had."""

    STORED = "stored"
    """Read from the store (or the process's cache of it)."""
    INLINE = "inline"
    """Computed in the request and stored: a small benchmark, or a caller that must answer."""
    JOB = "job"
    """Left to a ``compute_metrics`` job; the previous data version's numbers meanwhile."""


def way_of(facets: BenchmarkFacets, query: MetricsQuery, limit: int | None, stored: bool) -> Way:
    """The decision: stored, else inline up to ``limit`` labelled items, else a job.

    ``limit`` None computes any size inline (the API and the CLI answer with numbers).
    """
    if stored:
        return Way.STORED
    if limit is None or computes_inline(facets, query, limit):
        return Way.INLINE
    return Way.JOB


@dataclass(frozen=True)
class MetricsView:
    """What a metrics request shows.

    ``result`` is the current numbers (``STORED``, ``INLINE``), or for ``JOB`` the stale ones
    of an older data version (None when there are none yet) while ``job`` computes.
    """

    bench: Benchmark
    facets: BenchmarkFacets
    query: MetricsQuery
    way: Way
    result: MetricsResult | None
    job: Job | None = None

    @property
    def stale(self) -> bool:
        """Whether the numbers shown are an older data version's."""
        return self.way is Way.JOB and self.result is not None


def metrics_view(
    read: sessionmaker[Session],
    write: sessionmaker[Session],
    name: str,
    build: Callable[[BenchmarkFacets], MetricsQuery],
    *,
    limit: int | None,
    cache: VersionedCache | None = None,
    draw: Draw | None = None,
) -> MetricsView:
    """The numbers of the request ``build(facets)`` on benchmark ``name``, by :func:`way_of`.

    Reads in a ``read`` transaction; a result computed inline is stored, and a job queued
    (at most one per request and data version: polls find it), each in a short ``write``
    transaction. ``cache`` memoises the benchmark's facets.

    Raises
    ------
    NotFound, InvalidInput
        Unknown benchmark, label set or detector, a malformed request: refused at once, even
        when a job would compute it.

    """

    def save(result: MetricsResult) -> None:
        with transaction(write) as session:
            save_result(session, result)

    with transaction(read) as session:
        bench = get_benchmark(session, name)
        facets = benchmark_facets(session, bench, cache)
        query = build(facets)
        result = stored_result(session, bench, query)
        way = way_of(facets, query, limit, stored=result is not None)
        if way is Way.STORED:
            return MetricsView(bench, facets, query, way, result)
        if way is Way.INLINE:
            result = materialise(session, bench, query, save=save, draw=draw)
            return MetricsView(bench, facets, query, way, result)
        check_request(session, query)
        stale = stale_result(session, bench, query)
        job = latest_compute_job(session, bench, query)
    if job is None:
        # Polls only read; the first request queues the job.
        with transaction(write) as session:
            job = compute_job(session, bench, query)
    return MetricsView(bench, facets, query, way, stale, job)
