"""The metrics view: one decision (stored / inline / job, stale meanwhile), one benchmark lookup.

On both databases, on the bundled JudgeBench data; the page and the API are requested through
the app, the queue's before-you-accept section through its service.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.services.evidence.benchmarks import bump_data_version, get_benchmark
from app.services.jobs.metrics_view import Way, metrics_view, way_of
from app.services.metrics.metrics_query import METRICS_CACHE, MetricsQuery
from app.services.table.facets import benchmark_facets
from app.settings import Settings
from app.tables import Benchmark, Job
from tests.ingest.test_helpers import O1_MINI, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.support.auth_support import api_client

R = 100
LOOKUP = re.compile(r"FROM benchmarks\s+WHERE benchmarks\.name\s*=", re.I)


@pytest.fixture
def judgebench(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])
    METRICS_CACHE.clear()


@contextmanager
def benchmark_lookups() -> Iterator[list[str]]:
    """The statements, by any engine, that look a benchmark up by its name.

    The app's start-up warm-up (thread ``warm-up``) looks every benchmark up beside the
    request: its statements are not the request's.
    """
    seen: list[str] = []

    def listen(conn: object, cursor: object, statement: str, *args: object) -> None:
        if LOOKUP.search(statement) and threading.current_thread().name != "warm-up":
            seen.append(statement)

    event.listen(Engine, "before_cursor_execute", listen)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", listen)


@pytest.mark.parametrize(
    "path", ["/benchmarks/judgebench/metrics", "/api/benchmarks/judgebench/metrics"]
)
def test_a_cold_request_looks_its_benchmark_up_once(
    settings: Settings, judgebench: None, path: str
) -> None:
    with api_client(settings) as client:
        with benchmark_lookups() as seen:
            got = client.get(path, params={"resamples": R})
        assert got.status_code == 200
        assert len(seen) == 1, seen  # computed inline: the report, figures, judges
        with benchmark_lookups() as seen:
            assert client.get(path, params={"resamples": R}).status_code == 200
        assert len(seen) == 1, seen  # stored


def test_the_decision(settings: Settings, factory: sessionmaker[Session], judgebench: None) -> None:
    with factory() as session:
        facets = benchmark_facets(session, get_benchmark(session, "judgebench"))
    query = MetricsQuery("judgebench", resamples=R)
    labelled = sum(v.count for v in facets.label_sets[0].values if v.value is not None)
    assert way_of(facets, query, None, stored=True) is Way.STORED
    assert way_of(facets, query, 0, stored=True) is Way.STORED
    assert way_of(facets, query, None, stored=False) is Way.INLINE
    assert way_of(facets, query, labelled, stored=False) is Way.INLINE
    assert way_of(facets, query, labelled - 1, stored=False) is Way.JOB


def test_a_big_request_queues_one_job_and_shows_the_stale_numbers_meanwhile(
    factory: sessionmaker[Session], judgebench: None
) -> None:
    def view(limit: int | None) -> object:
        return metrics_view(
            factory, factory, "judgebench", lambda f: MetricsQuery("judgebench", resamples=R),
            limit=limit,
        )  # fmt: skip

    first = view(0)
    assert first.way is Way.JOB and first.result is None and first.job is not None
    assert not first.stale and first.job.status == "queued"
    again = view(0)
    assert again.job is not None and again.job.id == first.job.id  # found, not queued twice
    computed = view(None)  # the API computes whatever the size
    assert computed.way is Way.INLINE and computed.result is not None and computed.job is None
    assert view(0).way is Way.STORED
    with transaction(factory) as session:
        bump_data_version(session, get_benchmark(session, "judgebench"))
    stale = view(0)
    assert stale.way is Way.JOB and stale.stale and stale.result is not None
    assert stale.result.report == computed.result.report
    assert stale.result.data_version < stale.bench.evidence_version
    with factory() as session:
        jobs = session.scalars(select(Job).where(Job.kind == "compute_metrics")).all()
    assert len(jobs) == 2


def test_a_renamed_or_expired_benchmark_is_looked_up_again(
    factory: sessionmaker[Session], judgebench: None
) -> None:
    with transaction(factory) as session:
        bench = get_benchmark(session, "judgebench")
        bench.name = "renamed"
        session.flush()
        assert get_benchmark(session, "renamed") is bench
        with pytest.raises(Exception, match="no benchmark named 'judgebench'"):
            get_benchmark(session, "judgebench")
        session.rollback()
    with factory() as session, benchmark_lookups() as seen:
        bench = get_benchmark(session, "judgebench")
        assert get_benchmark(session, "judgebench") is bench and len(seen) == 1
        session.rollback()  # expires it: looked up again
        assert get_benchmark(session, "judgebench") is bench and len(seen) == 2
        assert session.scalar(select(Benchmark.name)) == "judgebench"
