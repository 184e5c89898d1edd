"""The ``warm_up`` job kind: compute what a benchmark's first visitor would otherwise wait for.

After an import (or on demand) the headline metrics of the benchmark's default request, every
scored detector against its default label set, are computed and kept, so the metrics page of
a big benchmark is served from the store instead of queueing a job on the first visit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labels import benchmark_label
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.metrics.metrics_query import MetricsQuery


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

    def describe(self) -> str:
        """E.g. "Prepare the first views of mmlu-redux: its headline metrics"."""
        return f"Prepare the first views of {self.benchmark}: its headline metrics"

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The metrics page it prepared."""
        return [JobLink(f"Metrics of {self.benchmark}", "metrics", self.benchmark)]
