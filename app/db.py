"""Engine creation (SQLite pragmas or PostgreSQL) and the one transaction scope helper."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from app.settings import Settings

# Address space for SQLite's memory-mapped reads; pages are shared with the OS page cache.
SQLITE_MMAP_BYTES = 256 * 2**20


def make_engine(settings: Settings) -> Engine:
    """Create the engine for ``settings``; SQLite gets WAL, foreign keys and a busy timeout."""
    url = settings.resolved_database_url
    if url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={
                "check_same_thread": False,
                "timeout": settings.sqlite_busy_timeout_ms / 1000,
            },
        )
        _install_sqlite_pragmas(engine, settings.sqlite_busy_timeout_ms)
        return engine
    if url.startswith("postgresql://"):
        # psycopg 3 is the one PostgreSQL driver we ship.
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    # JIT compilation costs 130-270 ms on the first count/facet queries of a page and gains
    # nothing on queries this small (measured in benchmarks/pages_bench.py).
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=20,
        connect_args={"options": "-c jit=off"},
    )


def _install_sqlite_pragmas(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # WAL lets the web server read while a worker or importer writes; the busy timeout makes
        # concurrent writers wait instead of failing with "database is locked".
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        # Pooled connections read through one shared memory map instead of each warming its
        # own 2 MB page cache with copies (table pages ~15% less CPU on 100,000 instances).
        cur.execute(f"PRAGMA mmap_size={SQLITE_MMAP_BYTES}")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.close()
        # pysqlite's own transaction handling defers BEGIN; let SQLAlchemy emit it so that
        # a write transaction holds its lock from the start.
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # IMMEDIATE for writers (see `immediate`): a deferred transaction that reads first and
        # then writes fails at once with "database is locked" if another connection committed
        # in between (the WAL snapshot is stale), without waiting for the busy timeout.
        conn.exec_driver_sql(f"BEGIN {conn.get_execution_options().get(_BEGIN_MODE, '')}")


_BEGIN_MODE = "appellate_sqlite_begin"


def immediate(engine: Engine) -> Engine:
    """The engine whose SQLite transactions take the write lock at BEGIN (others unchanged).

    For short read-then-write transactions that run beside other writers (job claims,
    heartbeats, per-batch results, queue actions from the web): they wait for the lock under
    the busy timeout instead of failing when their snapshot turns out to be stale.
    """
    return engine.execution_options(**{_BEGIN_MODE: "IMMEDIATE"}) if is_sqlite(engine) else engine


def is_write_session(session: Session) -> bool:
    """Whether ``session`` comes from a write factory (a SQLite ``BEGIN IMMEDIATE`` one).

    On PostgreSQL both factories share one engine, and this is False: what needs it (a memo
    that must not keep what a transaction rolling back wrote) is safe there, as PostgreSQL
    never gives an id twice.
    """
    return session.get_bind().get_execution_options().get(_BEGIN_MODE) == "IMMEDIATE"


def is_sqlite(engine: Engine) -> bool:
    """Whether ``engine`` talks to SQLite (the embedded default)."""
    return engine.dialect.name == "sqlite"


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """A session factory bound to ``engine``; objects stay readable after commit."""
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
