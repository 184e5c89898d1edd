"""The store side of a model run over a benchmark (answering, judging): its detector and items."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.detectors import ensure_detector
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


# (session, benchmark id, run detector id) -> the ids of the run's items, in run order.
ItemChooser = Callable[[Session, int, int], list[int]]
# Ids per IN list: far below every backend's limit on bound parameters.
_ID_CHUNK = 5000


def run_items(
    session: Session,
    params: RunParams,
    details: dict[str, Any],
    choose: ItemChooser | None = None,
) -> RunItems:
    """The run's items and detector (created if new).

    The items are the benchmark's first ``limit`` by id, or those ``choose`` picks (in its
    order) when a limit is set.

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
    if choose is None or params.limit is None:
        rows = session.execute(q.order_by(Instance.id).limit(params.limit))
        return RunItems(bench.id, run.id, [(i, e, p) for i, e, p in rows])
    ids = choose(session, bench.id, run.id)
    found: dict[int, tuple[int, str, dict[str, Any]]] = {}
    for start in range(0, len(ids), _ID_CHUNK):
        chunk = q.where(Instance.id.in_(ids[start : start + _ID_CHUNK]))
        found.update((i, (i, e, p)) for i, e, p in session.execute(chunk))
    return RunItems(bench.id, run.id, [found[i] for i in ids])
