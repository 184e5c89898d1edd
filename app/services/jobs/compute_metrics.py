"""The ``compute_metrics`` job kind: one metrics request computed and kept for every page.

A metrics view on a big benchmark leaves its missing result to this job (small ones are
computed inline; see :mod:`app.services.metrics.metric_results`). The app queues it itself, at
most one per request and data version, so it is not offered as a form or an API route.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.jobs import queue as job_queue
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.jobs.warm_up import WarmUpParams
from app.services.metrics.metric_results import (
    params_key,
    query_from_params,
    query_params,
    result_version,
)
from app.services.metrics.metrics_query import MetricsQuery
from app.tables import Benchmark, Job, JobStatus


@job_kind
@dataclass(frozen=True)
class ComputeMetricsParams(JobParams):
    """A metrics request (:func:`query_params` of a :class:`MetricsQuery`) on one data version.

    ``params_key`` names the request whatever the version; ``data_version`` is the version the
    result is for (:func:`result_version`), so a job of an older version is not reused.
    """

    kind = "compute_metrics"
    title = "Compute metrics"
    startable = False

    benchmark: str
    params_key: str
    data_version: int
    query: dict[str, Any]

    def validate(self) -> None:
        """The request itself is a valid :class:`MetricsQuery` of this benchmark."""
        self.metrics_query()

    def metrics_query(self) -> MetricsQuery:
        """The request (checked again: ``InvalidInput``)."""
        return query_from_params({**self.query, "benchmark": self.benchmark})

    def describe(self) -> str:
        """E.g. "Compute metrics of jb against reference (original labels), 2000 resamples"."""
        q = self.metrics_query()
        by = f", by {q.slice_field}" if q.slice_field else ""
        return (
            f"Compute metrics of {q.benchmark} against {q.label} ({q.labels} labels){by}, "
            f"{q.resamples} resamples"
        )

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The metrics page of the request."""
        q = self.metrics_query()
        pairs = [("label", q.label), ("labels", q.labels), ("resamples", str(q.resamples))]
        if q.slice_field:
            pairs.append(("slice", q.slice_field))
        pairs += [("detector", d) for d in q.detectors or ()]
        return [JobLink(f"Metrics of {q.benchmark}", "metrics", q.benchmark, query=tuple(pairs))]


def latest_compute_job(session: Session, bench: Benchmark, query: MetricsQuery) -> Job | None:
    """The newest ``compute_metrics`` job of ``query`` on the current data version, not done.

    Queued, running or failed (a failed one is shown, not queued again at every page view:
    retry it on its page); ``None`` when there is none (or it is done, or cancelled). Where
    there is none, the benchmark's waiting or running warm-up when ``query`` is its headline
    request: it computes the same numbers (a visitor during the warm-up queued a second
    computation of them before).
    """
    key = params_key(bench, query)
    job = _latest_compute_metrics(session, bench, query, key)
    return job if job is not None else _warming_up(session, bench, key)


def _latest_compute_metrics(
    session: Session, bench: Benchmark, query: MetricsQuery, key: str
) -> Job | None:
    candidates = session.scalars(
        select(Job)
        .where(Job.kind == ComputeMetricsParams.kind, Job.status != JobStatus.cancelled.value)
        .order_by(Job.id.desc())
        .limit(200)
    )
    for job in candidates:
        params = job.params or {}
        current = params.get("data_version") == result_version(bench, query)
        if params.get("params_key") == key and current:
            return None if job.status == JobStatus.done.value else job
    return None


def _warming_up(session: Session, bench: Benchmark, key: str) -> Job | None:
    pending = session.scalars(
        select(Job)
        .where(
            Job.kind == WarmUpParams.kind,
            Job.status.in_([JobStatus.queued.value, JobStatus.running.value]),
        )
        .order_by(Job.id.desc())
    )
    for job in pending:
        params = WarmUpParams.from_dict(job.params or {})
        if params.benchmark == bench.name and params_key(bench, params.headline(session)) == key:
            return job
    return None


def compute_job(session: Session, bench: Benchmark, query: MetricsQuery) -> Job:
    """:func:`latest_compute_job`, else a new ``compute_metrics`` job (flushed, not committed)."""
    job = latest_compute_job(session, bench, query)
    if job is not None:
        return job
    params = ComputeMetricsParams(
        benchmark=bench.name,
        params_key=params_key(bench, query),
        data_version=result_version(bench, query),
        query=query_params(query),
    )
    return job_queue.enqueue(session, params.kind, params.as_dict())
