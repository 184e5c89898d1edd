"""INSERT ... ON CONFLICT for the dialect at hand: one statement instead of check-then-insert.

PostgreSQL and SQLite spell the upsert the same way, each through its own ``insert`` construct;
:func:`dialect_insert` picks the one of the session's engine, so a service writes it once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def dialect_insert(session: Session, table: Any) -> postgresql.Insert | sqlite.Insert:
    """An ``INSERT`` into ``table`` (a table or mapped class) with ``on_conflict_*`` methods."""
    name = session.get_bind().dialect.name
    return postgresql.insert(table) if name == "postgresql" else sqlite.insert(table)
