"""The tests' emptying of a PostgreSQL database ends a session a test left open, not waits."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.tables import Benchmark
from tests.conftest import truncate_pg


def test_a_session_left_in_a_transaction_does_not_stall_the_teardown(
    engine: Engine, dialect: str
) -> None:
    if dialect != "postgresql":
        pytest.skip("SQLite empties its tables with DELETE, which waits on no reader's lock")
    with Session(engine) as session, session.begin():
        session.add(Benchmark(name="left", kind="pairwise"))
    leftover = engine.connect()
    leftover.begin()
    leftover.execute(select(func.count()).select_from(Benchmark))  # holds ACCESS SHARE
    start = time.monotonic()
    with pytest.warns(UserWarning, match="teardown ended sessions"):
        truncate_pg(engine, ["benchmarks"], lock_timeout="1s")
    assert time.monotonic() - start < 15
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(Benchmark)) == 0
    leftover.invalidate()
