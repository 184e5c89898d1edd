"""Run Alembic migrations programmatically against an engine (CLI, demo and tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine

from app.db import is_sqlite

ROOT = Path(__file__).resolve().parent.parent


def alembic_config() -> Config:
    """The Alembic configuration of the repository (``alembic.ini`` beside ``migrations/``)."""
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    return cfg


@contextmanager
def _migration_connection(engine: Engine) -> Iterator[Connection]:
    """A connection in one transaction for migrations; SQLite's foreign keys off meanwhile.

    Batch migrations rebuild a SQLite table (copy, drop the old one, rename the copy): with
    foreign keys enforced, dropping a parent table would cascade-delete every child row, so
    they are turned off around the migration (SQLite's documented ALTER procedure) and the
    result is checked with ``PRAGMA foreign_key_check`` before it commits.
    """
    with engine.connect() as conn:
        # The PRAGMA is a no-op inside a transaction: set it on the raw connection first.
        raw = conn.connection.driver_connection if is_sqlite(engine) else None
        if raw is not None:
            raw.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                yield conn
                if raw is not None:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if broken:
                        raise RuntimeError(f"migration broke foreign keys: {broken[:5]}")
        finally:
            if raw is not None:
                raw.execute("PRAGMA foreign_keys=ON")


def _run(engine: Engine, step: Callable[[Config], None]) -> None:
    cfg = alembic_config()
    with _migration_connection(engine) as conn:
        cfg.attributes["connection"] = conn
        step(cfg)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the database behind ``engine`` to ``revision``."""
    _run(engine, lambda cfg: command.upgrade(cfg, revision))


def downgrade(engine: Engine, revision: str) -> None:
    """Downgrade the database behind ``engine`` to ``revision``."""
    _run(engine, lambda cfg: command.downgrade(cfg, revision))
