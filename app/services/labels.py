"""Append-only label events and the derived current value of each label set."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Select, func, insert, select
from sqlalchemy.orm import Session

from app.tables import Instance, LabelEvent, utcnow

# Bound on the ids in one ``IN (...)`` list: far below SQLite's and psycopg's parameter limits.
_ID_CHUNK = 5000


def latest_event_ids(label_name: str | None = None) -> Select[tuple[int]]:
    """Ids of the latest event per (instance, label name): the current value of each label set."""
    q = select(func.max(LabelEvent.id)).group_by(LabelEvent.instance_id, LabelEvent.label_name)
    if label_name is not None:
        q = q.where(LabelEvent.label_name == label_name)
    return q


def current_label_subquery(label_name: str) -> Any:
    """A correlated scalar subquery: the current value of ``label_name`` for ``Instance.id``."""
    return (
        select(LabelEvent.value)
        .where(LabelEvent.instance_id == Instance.id, LabelEvent.label_name == label_name)
        .order_by(LabelEvent.id.desc())
        .limit(1)
        .correlate(Instance)
        .scalar_subquery()
    )


def current_labels(
    session: Session, instance_ids: Sequence[int], label_names: Iterable[str] | None = None
) -> dict[int, dict[str, str]]:
    """Current non-null values ``{instance_id: {label_name: value}}`` of the given instances."""
    if not instance_ids:
        return {}
    latest = (
        select(func.max(LabelEvent.id))
        .where(LabelEvent.instance_id.in_(instance_ids))
        .group_by(LabelEvent.instance_id, LabelEvent.label_name)
    )
    q = select(LabelEvent.instance_id, LabelEvent.label_name, LabelEvent.value).where(
        LabelEvent.id.in_(latest)
    )
    if label_names is not None:
        q = q.where(LabelEvent.label_name.in_(list(label_names)))
    out: dict[int, dict[str, str]] = {i: {} for i in instance_ids}
    for iid, name, value in session.execute(q):
        if value is not None:
            out[iid][name] = value
    return out


def label_history(session: Session, instance_id: int) -> list[LabelEvent]:
    """Every label event of one instance, oldest first."""
    q = select(LabelEvent).where(LabelEvent.instance_id == instance_id).order_by(LabelEvent.id)
    return list(session.scalars(q))


def label_names(session: Session, benchmark_id: int) -> list[str]:
    """The label set names used in a benchmark, sorted."""
    q = (
        select(LabelEvent.label_name)
        .join(Instance, Instance.id == LabelEvent.instance_id)
        .where(Instance.benchmark_id == benchmark_id)
        .distinct()
        .order_by(LabelEvent.label_name)
    )
    return list(session.scalars(q))


def append_label(
    session: Session,
    instance_id: int,
    label_name: str,
    value: str | None,
    *,
    source: str,
    author: str = "",
    reason: str = "",
    tags: list[str] | None = None,
) -> LabelEvent | None:
    """Append an event unless it would not change the current value; never rewrites history."""
    current = session.scalar(
        select(LabelEvent.value)
        .where(LabelEvent.instance_id == instance_id, LabelEvent.label_name == label_name)
        .order_by(LabelEvent.id.desc())
        .limit(1)
    )
    exists = session.scalar(
        select(func.count())
        .select_from(LabelEvent)
        .where(LabelEvent.instance_id == instance_id, LabelEvent.label_name == label_name)
    )
    if not _changes(bool(exists), current, value):
        return None
    event = LabelEvent(
        instance_id=instance_id,
        label_name=label_name,
        value=value,
        source=source,
        author=author,
        reason=reason,
        tags=tags or [],
    )
    session.add(event)
    session.flush()
    return event


def _changes(exists: bool, current: str | None, value: str | None) -> bool:
    """Whether appending ``value`` changes the label: the one rule of every append."""
    # A retraction (None) of a label that never existed would only add noise to the history.
    return current != value if exists else value is not None


def latest_label_values(
    session: Session, label_name: str, instance_ids: Collection[int]
) -> dict[int, str | None]:
    """The latest value of ``label_name`` per instance, retractions (None) included.

    Instances without any event of that label are absent from the result.
    """
    ids = list(instance_ids)
    out: dict[int, str | None] = {}
    for start in range(0, len(ids), _ID_CHUNK):
        chunk = ids[start : start + _ID_CHUNK]
        latest = (
            select(func.max(LabelEvent.id))
            .where(LabelEvent.instance_id.in_(chunk), LabelEvent.label_name == label_name)
            .group_by(LabelEvent.instance_id)
        )
        q = select(LabelEvent.instance_id, LabelEvent.value).where(LabelEvent.id.in_(latest))
        out.update({iid: value for iid, value in session.execute(q)})
    return out


def append_labels(
    session: Session,
    label_name: str,
    values: Mapping[int, str | None],
    *,
    source: str,
    author: str = "",
    reasons: Mapping[int, str] | None = None,
) -> int:
    """Bulk :func:`append_label`: append ``{instance_id: value}`` where it changes the label.

    Same rule as :func:`append_label` (an unchanged value or the retraction of an absent label
    appends nothing), in a few set-based statements instead of two queries per instance.

    Returns
    -------
    int
        The number of events appended.

    """
    current = latest_label_values(session, label_name, values.keys())
    now = utcnow()
    rows = [
        {
            "instance_id": iid,
            "label_name": label_name,
            "value": value,
            "source": source,
            "author": author,
            "reason": (reasons or {}).get(iid, ""),
            "tags": [],
            "created_at": now,
        }
        for iid, value in values.items()
        if _changes(iid in current, current.get(iid), value)
    ]
    if rows:
        session.execute(insert(LabelEvent.__table__), rows)
    return len(rows)
