"""The store side of a model run over a benchmark (answering, judging): its detector and items."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.benchmarks import get_benchmark
from app.services.detectors import ensure_detector
from app.tables import Instance


class RunDetector(NamedTuple):
    """The detector a run writes: its name, kind and description."""

    name: str
    kind: str
    description: str


class RunParams(Protocol):
    """What a run's parameters say about its items and its detector."""

    @property
    def benchmark(self) -> str:
        """The benchmark's name."""

    @property
    def limit(self) -> int | None:
        """How many items (the first by id); ``None`` for all."""

    def run_detector(self) -> RunDetector:
        """The detector the run writes."""


@dataclass(frozen=True)
class RunItems:
    """A run's benchmark and detector ids, and its items as (id, external id, payload) rows."""

    benchmark_id: int
    detector_id: int
    rows: list[tuple[int, str, dict[str, Any]]]


def run_items(session: Session, params: RunParams, details: dict[str, Any]) -> RunItems:
    """The run's items (its benchmark's first ``limit`` by id) and detector (created if new).

    Raises
    ------
    NotFound
        If there is no such benchmark.

    """
    bench = get_benchmark(session, params.benchmark)
    detector = params.run_detector()
    run = ensure_detector(
        session, detector.name, detector.kind, description=detector.description, details=details
    )
    q = select(Instance.id, Instance.external_id, Instance.payload).where(
        Instance.benchmark_id == bench.id
    )
    rows = session.execute(q.order_by(Instance.id).limit(params.limit))
    return RunItems(bench.id, run.id, [(i, e, p) for i, e, p in rows])
