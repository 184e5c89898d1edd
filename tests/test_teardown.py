"""The tests' emptying of a PostgreSQL database ends a session a test left open, not waits."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import Engine, delete, func, select, text
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


def test_the_teardown_empties_what_a_test_used_and_restarts_its_ids(
    engine: Engine, dialect: str
) -> None:
    if dialect != "postgresql":
        pytest.skip("SQLite empties every table with DELETE: there is no per-table choice")

    def file_of(table: str) -> int:
        with engine.connect() as conn:
            return int(conn.scalar(text(f"SELECT pg_relation_filenode('{table}')")))

    with Session(engine) as session, session.begin():
        kept = Benchmark(name="kept", kind="pairwise")
        gone = Benchmark(name="gone", kind="pairwise")
        session.add_all([kept, gone])
        session.flush()
        gone_id = gone.id
    with Session(engine) as session, session.begin():
        session.delete(session.get(Benchmark, gone_id))
    untouched = file_of("users")
    truncate_pg(engine, ["benchmarks", "users"])
    with Session(engine) as session, session.begin():
        again = Benchmark(name="again", kind="pairwise")
        session.add(again)
        session.flush()
        assert again.id == 1  # RESTART IDENTITY reached the used table
    assert file_of("users") == untouched, "an empty, unused table was truncated"
    # A table emptied by the test itself but whose ids moved on is truncated too.
    with Session(engine) as session, session.begin():
        session.execute(delete(Benchmark))
    truncate_pg(engine, ["benchmarks", "users"])
    with Session(engine) as session, session.begin():
        fresh = Benchmark(name="fresh", kind="pairwise")
        session.add(fresh)
        session.flush()
        assert fresh.id == 1
