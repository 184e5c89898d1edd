"""Append-only label events and the derived current value of each label set.

The history of one (instance, label set) holds three kinds of events: the original label
(imports, derived labels and every source not named below), annotators' votes and reviewers'
adjudications. The "current" value every reader here returns is the latest *original* event;
review only changes what :mod:`app.services.evidence.resolution` calls the resolved value, so one
annotator's vote never silently moves the dashboard's labels or metrics.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, exists, func, insert, select
from sqlalchemy.orm import Session, aliased
from sqlalchemy.orm.util import AliasedClass

from app.sql.lookup import added
from app.tables import Instance, LabelEvent, utcnow

VOTE = "vote"
ADJUDICATION = "adjudication"
# Every other source (import, derived, and whatever importers add later) writes the original.
REVIEW_SOURCES: tuple[str, ...] = (VOTE, ADJUDICATION)

# Bound on the ids in one ``IN (...)`` list: far below SQLite's and psycopg's parameter limits.
_ID_CHUNK = 5000

_Events = type[LabelEvent] | AliasedClass[LabelEvent]


def is_original(events: _Events = LabelEvent) -> ColumnElement[bool]:
    """The condition that an event of ``events`` (the table or an alias) writes the original.

    The one definition of "not review" every current-label reader uses.
    """
    return events.source.not_in(REVIEW_SOURCES)


def is_latest_original() -> ColumnElement[bool]:
    """The condition that a ``LabelEvent`` row is the current (latest original) event of its set.

    "No later original event of the same set" rather than ``max(id)`` per group: PostgreSQL
    runs it as one anti-join on the (instance_id, label_name, id) index (5x faster than the
    grouped ``IN``), SQLite at the same speed.
    """
    later = aliased(LabelEvent)
    return and_(
        is_original(),
        ~exists().where(
            later.instance_id == LabelEvent.instance_id,
            later.label_name == LabelEvent.label_name,
            later.id > LabelEvent.id,
            is_original(later),
        ),
    )


def latest_event_ids(label_name: str | None = None) -> Select[tuple[int]]:
    """Ids of the latest original event per (instance, label name): each set's current value."""
    q = (
        select(func.max(LabelEvent.id))
        .where(is_original())
        .group_by(LabelEvent.instance_id, LabelEvent.label_name)
    )
    if label_name is not None:
        q = q.where(LabelEvent.label_name == label_name)
    return q


def current_label_subquery(label_name: str) -> Any:
    """A correlated scalar subquery: the current value of ``label_name`` for ``Instance.id``."""
    return (
        select(LabelEvent.value)
        .where(
            LabelEvent.instance_id == Instance.id,
            LabelEvent.label_name == label_name,
            is_original(),
        )
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
        .where(LabelEvent.instance_id.in_(instance_ids), is_original())
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


# The label set a page, the CLI or a review queue uses when none is asked for.
DEFAULT_LABEL = "reference"


def default_label_set(names: Sequence[str], label: str | None = None) -> str:
    """``label``, else ``reference`` when ``names`` has it (or is empty), else the first name.

    The one rule for every surface: the metrics and disagreements pages and APIs, the CLI and
    the review queues all pick the same label set for a benchmark without ``reference``.
    """
    if label:
        return label
    return DEFAULT_LABEL if DEFAULT_LABEL in names or not names else sorted(names)[0]


def benchmark_label(session: Session, benchmark_id: int, label: str | None) -> str:
    """``label``, else the benchmark's default label set (:func:`default_label_set`)."""
    return label or default_label_set(label_names(session, benchmark_id))


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


def label_event_values(session: Session, benchmark_id: int, label_name: str) -> list[str]:
    """The non-null values any event of ``label_name`` holds in a benchmark, votes included.

    A label set people voted on but nobody imported has values only here (its facet, which
    counts current originals, has none).
    """
    q = (
        select(LabelEvent.value)
        .join(Instance, Instance.id == LabelEvent.instance_id)
        .where(
            Instance.benchmark_id == benchmark_id,
            LabelEvent.label_name == label_name,
            LabelEvent.value.is_not(None),
        )
        .distinct()
    )
    return sorted(session.scalars(q))


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
    """Append an event unless it would not change its own history; never rewrites history.

    An original source is compared with the latest original event, a ``vote`` with the same
    author's latest vote and an ``adjudication`` with the latest adjudication (see
    :func:`_history_of`), so a vote that agrees with the original label is still recorded.
    Null retracts an original label or withdraws a vote (appended only if there is one), and
    adjudicates to "no label" (appended unless the latest adjudication already says so).
    """
    latest = session.execute(
        select(LabelEvent.value)
        .where(
            LabelEvent.instance_id == instance_id,
            LabelEvent.label_name == label_name,
            _history_of(source, author),
        )
        .order_by(LabelEvent.id.desc())
        .limit(1)
    ).first()
    current = latest[0] if latest is not None else None
    if not _changes(source, latest is not None, current, value):
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
    return added(session, event)


def _history_of(source: str, author: str) -> ColumnElement[bool]:
    """The events a new event of ``source`` by ``author`` replaces, so may make it a no-op."""
    if source == VOTE:
        # Each author holds one vote: neither the original nor another author's equal vote
        # makes this one redundant.
        return and_(LabelEvent.source == VOTE, LabelEvent.author == author)
    if source == ADJUDICATION:
        return LabelEvent.source == ADJUDICATION
    return is_original()


def _changes(source: str, exists: bool, current: str | None, value: str | None) -> bool:
    """Whether appending ``value`` changes its history: the one rule of every append."""
    if source == ADJUDICATION:
        # A null adjudication is a decision ("no label"), not a retraction: the first one
        # changes the resolved value like any other.
        return not exists or current != value
    # A retraction (None) of a label, or a withdrawal of a vote, that never existed would
    # only add noise to the history.
    return current != value if exists else value is not None


def latest_label_values(
    session: Session, label_name: str, instance_ids: Collection[int]
) -> dict[int, str | None]:
    """The current (latest original) value of ``label_name`` per instance, retractions included.

    Instances without any original event of that label are absent from the result.
    """
    return _latest_values(session, label_name, instance_ids, is_original())


def _latest_values(
    session: Session,
    label_name: str,
    instance_ids: Collection[int],
    history: ColumnElement[bool],
) -> dict[int, str | None]:
    """The latest value per instance among the events of ``label_name`` matching ``history``."""
    ids = list(instance_ids)
    out: dict[int, str | None] = {}
    for start in range(0, len(ids), _ID_CHUNK):
        chunk = ids[start : start + _ID_CHUNK]
        latest = (
            select(func.max(LabelEvent.id))
            .where(
                LabelEvent.instance_id.in_(chunk),
                LabelEvent.label_name == label_name,
                history,
            )
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

    Same rule as :func:`append_label` (a value unchanged in the event's own history, or the
    retraction of an absent label, appends nothing), in a few set-based statements instead of a
    query per instance.

    Returns
    -------
    int
        The number of events appended.

    """
    current = _latest_values(session, label_name, values.keys(), _history_of(source, author))
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
        if _changes(source, iid in current, current.get(iid), value)
    ]
    if rows:
        session.execute(insert(LabelEvent.__table__), rows)
    return len(rows)
