"""The one shape of "fetch this row by its name or id, or say it does not exist", and of adding one.

Every ``get_benchmark``/``get_job``/``get_user``-style function is a one-line call of
:func:`get_one` with its own message; a service that creates a row returns :func:`added`, and
the get-or-create services (``ensure_benchmark``, ``register_language_model``, ...) are
:func:`ensure_named`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import Conflict, NotFound
from app.tables import Base

RowT = TypeVar("RowT", bound=Base)


def get_one(session: Session, table: type[RowT], missing: str, /, **where: Any) -> RowT:
    """The row of ``table`` whose columns equal ``where``, else ``NotFound(missing)``.

    Parameters
    ----------
    session : Session
        The caller's session.
    table : type
        An ORM table class (``Benchmark``, ``Job``, ...).
    missing : str
        The NotFound message (it names what was looked for, e.g. ``no job 7``).
    **where
        Column values to match: a unique key (``name=...``), a primary key alone (``id=...``,
        served from the session's identity map when the row is loaded already), or a key plus
        a condition the row must meet (``name=..., kind="probe"``).

    Returns
    -------
    The matching row (the first, if ``where`` is not a unique key).

    Raises
    ------
    NotFound
        If no row matches.

    """
    if where.keys() == {"id"}:
        row = session.get(table, where["id"])
    else:
        row = session.scalar(select(table).filter_by(**where))
    if row is None:
        raise NotFound(missing)
    return row


def added(session: Session, row: RowT) -> RowT:
    """``row``, added to the session and flushed (so it has its id; the caller commits)."""
    session.add(row)
    session.flush()
    return row


def ensure_named(
    session: Session,
    table: type[RowT],
    name: str,
    fixed: Mapping[str, Any],
    new: Mapping[str, Any],
    conflict: Callable[[RowT, list[str]], str] | None = None,
) -> RowT:
    """The row of ``table`` called ``name``, created (flushed) with ``fixed`` and ``new`` if absent.

    An existing row must hold ``fixed`` (the values that define it); ``new`` only describes a
    row being created, an existing one keeps its own.

    Raises
    ------
    Conflict
        If the existing row differs in a field of ``fixed``; the message is
        ``conflict(row, differing field names)``.

    """
    existing = session.scalar(select(table).filter_by(name=name))
    if existing is None:
        return added(session, table(name=name, **fixed, **new))
    differing = [key for key, value in fixed.items() if getattr(existing, key) != value]
    if differing and conflict is not None:
        raise Conflict(conflict(existing, differing))
    return existing
