"""The one writer of kept results: older versions in scope go, a row already kept stays."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.sql.kept_results import keep_result
from app.tables import Benchmark, MetricResult

UNIQUE = ("benchmark_id", "params_key", "data_version")


def _keep(session: Session, bench: int, key: str, version: int, report: str) -> None:
    values = {
        "benchmark_id": bench,
        "params_key": key,
        "data_version": version,
        "params": {},
        "report": report,
    }
    keep_result(
        session,
        MetricResult,
        values,
        version="data_version",
        scope=("benchmark_id", "params_key"),
        unique=UNIQUE,
    )


def _rows(factory: sessionmaker[Session]) -> set[tuple[str, int, str]]:
    with transaction(factory) as session:
        found = session.execute(
            select(MetricResult.params_key, MetricResult.data_version, MetricResult.report)
        )
        return {tuple(row) for row in found}


def test_keep_result_replaces_older_versions_in_scope_only(
    factory: sessionmaker[Session],
) -> None:
    with transaction(factory) as session:
        bench = Benchmark(name="b", kind="pairwise")
        session.add(bench)
        session.flush()
        bench_id = bench.id
    with transaction(factory) as session:
        _keep(session, bench_id, "k1", 1, "first")
        _keep(session, bench_id, "k2", 1, "other request")
    with transaction(factory) as session:
        # The same request and version again (a second process): the kept row stays.
        _keep(session, bench_id, "k1", 1, "second")
    assert _rows(factory) == {("k1", 1, "first"), ("k2", 1, "other request")}
    with transaction(factory) as session:
        _keep(session, bench_id, "k1", 3, "newer")
    # k1's version 1 is gone; k2 is outside the scope of k1's write and stays.
    assert _rows(factory) == {("k1", 3, "newer"), ("k2", 1, "other request")}
