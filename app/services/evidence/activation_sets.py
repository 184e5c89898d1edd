"""Activation set rows: where an activation array lives, how it was captured, its instance order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.sql.lookup import ensure_named, get_one
from app.tables import ActivationSet


def ensure_activation_set(
    session: Session,
    name: str,
    *,
    benchmark_id: int,
    model_fingerprint: str,
    path: str,
    layers: Sequence[int],
    position_rule: str,
    dtype: str,
    d_model: int,
    model_id: int | None = None,
    details: dict[str, Any] | None = None,
) -> ActivationSet:
    """The activation set ``name``, created empty if new; an existing one must match the spec.

    Parameters
    ----------
    session
        The caller's session; a new row is flushed, never committed.
    name
        Unique set name.
    benchmark_id, model_id, model_fingerprint
        What was captured, and from which weights.
    path
        Folder of the array files, relative to the data directory.
    layers
        Layer indices (0 = embeddings, ``i`` = output of block ``i - 1``), in column order.
    position_rule, dtype, d_model
        How the position was chosen, the stored dtype and the vector width.
    details
        Free-form notes stored when the set is created.

    Raises
    ------
    Conflict
        If ``name`` exists with a different benchmark, fingerprint, path, layers, rule, dtype or
        width (resuming must not mix differently captured rows).
    InvalidInput
        If ``path`` is absolute or climbs out of the data directory.

    """
    if path.startswith(("/", "\\")) or ".." in path.replace("\\", "/").split("/"):
        raise InvalidInput(f"activation path {path!r} must stay inside the data directory")
    # The fields that define what the set's numbers mean: re-opening a set with other values
    # would mix incompatible rows in one array.
    spec: dict[str, Any] = {
        "benchmark_id": benchmark_id,
        "model_fingerprint": model_fingerprint,
        "path": path,
        "layers": [int(x) for x in layers],
        "position_rule": position_rule,
        "dtype": dtype,
        "d_model": int(d_model),
    }
    return ensure_named(
        session,
        ActivationSet,
        name,
        spec,
        {"model_id": model_id, "instance_ids": [], "details": details or {}},
        lambda _, differing: f"activation set {name!r} exists with another {', '.join(differing)}",
    )


def get_activation_set(session: Session, name: str) -> ActivationSet:
    """The activation set called ``name`` (``NotFound`` if there is none)."""
    return get_one(session, ActivationSet, f"no activation set named {name!r}", name=name)


def list_activation_sets(session: Session, benchmark_id: int | None = None) -> list[ActivationSet]:
    """Activation sets, by name, optionally of one benchmark only."""
    query = select(ActivationSet).order_by(ActivationSet.name)
    if benchmark_id is not None:
        query = query.where(ActivationSet.benchmark_id == benchmark_id)
    return list(session.scalars(query))


def set_instance_order(
    session: Session, activation_set: ActivationSet, instance_ids: Sequence[int]
) -> None:
    """Record the row order of the set's files (row ``i`` belongs to ``instance_ids[i]``).

    The files are the source of truth: writers call this after each batch with the order read
    back from them, so a crash between writing a file and this update is repaired on resume.

    Raises
    ------
    InvalidInput
        If an instance id repeats.

    """
    ids = [int(x) for x in instance_ids]
    if len(set(ids)) != len(ids):
        raise InvalidInput(f"activation set {activation_set.name!r}: repeated instance ids")
    # A new list, not an in-place change: the JSON column only notices reassignment.
    activation_set.instance_ids = ids
    session.flush()
