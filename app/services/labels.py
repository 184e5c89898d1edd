"""Append-only label events and the derived current value of each label set."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from app.tables import Instance, LabelEvent


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
    if exists and current == value:
        return None
    if not exists and value is None:
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
