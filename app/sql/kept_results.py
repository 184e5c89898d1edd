"""Results kept in the store per version: one writer for metric results, disagreement lists, facets.

Each kept result is a row named by a version (the benchmark's data or evidence version) and, for
most, a request key. Writing one removes the rows of older versions in its scope (they were
kept only to be shown as stale until this one was computed) and inserts the new row with
``INSERT ... ON CONFLICT DO NOTHING`` on both dialects: two processes that computed the same
result side by side both succeed, and what they computed is the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from app.sql.dialect_insert import dialect_insert


def keep_result(
    session: Session,
    model: Any,
    values: Mapping[str, Any],
    *,
    version: str,
    scope: Sequence[str],
    unique: Sequence[str],
) -> None:
    """Store ``values`` as a row of ``model``; drop the older versions in its scope.

    Parameters
    ----------
    session
        The caller's transaction (flushed, never committed here).
    model
        The mapped class of the kept results.
    values
        The new row, column by column; it holds ``version`` and every column of ``scope`` and
        ``unique``.
    version
        The version column: rows in scope with a lower version are deleted.
    scope
        Columns whose values name the rows this one supersedes (e.g. the benchmark alone, or
        the benchmark and the request key).
    unique
        The columns of the unique index the insert yields to (a row already there stays).

    """
    older = [getattr(model, column) == values[column] for column in scope]
    session.execute(delete(model).where(*older, getattr(model, version) < values[version]))
    session.execute(
        dialect_insert(session, model)
        .values(**values)
        .on_conflict_do_nothing(index_elements=unique)
    )
