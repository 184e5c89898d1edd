"""Alembic environment: uses a connection handed in by ``app.migrate``, else the settings URL."""

from __future__ import annotations

from alembic import context

from app.db import make_engine
from app.settings import Settings
from app.tables import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: object) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # Batch mode recreates SQLite tables for ALTERs; PostgreSQL runs the same ops natively.
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = make_engine(Settings())
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()
