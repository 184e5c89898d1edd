"""A queue's item states kept between requests, folded again only where an item's events changed.

The queue page, every item page and the queue list show a queue's progress, which needs every
item's resolution. Folding the label events of a 2,000-item queue on each of those requests
was the largest cost of a 20-reviewer soak at a million items (queue page p50 0.87 s, item page
0.42 s). Label events are append-only, so an item's events changed exactly when their count or
highest id did: one grouped read of (count, max id) per item says which items to fold again,
and the rest keep the resolution folded before.

Only a read session keeps what it folded. In a SQLite write transaction that rolls back, an
appended event's id is given again to the next event, so a later item with the same count and
highest id could differ from the state kept; PostgreSQL never gives an id twice, and a read
session sees only committed events.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sqlalchemy import Select, and_, func, select
from sqlalchemy.orm import Session

from app.db import is_write_session
from app.services.evidence.resolution import Resolution, fold, latest_events
from app.tables import LabelEvent, QueueItem, ReviewQueue

# Queues whose states a process keeps; the least recently read one is dropped first.
MAX_KEPT_QUEUES = 16
# Changed items folded by id lists of at most this many; above it the whole queue is read by
# a subquery (a first fold, or a queue re-ordered wholesale).
FOLD_BY_IDS_UP_TO = 1000

Mark = tuple[int, int]


@dataclass(frozen=True)
class QueueStates:
    """A queue's items in queue order and each one's resolution (absent: no event yet)."""

    ids: list[int]
    states: Mapping[int, Resolution]


@dataclass(frozen=True)
class _Kept:
    marks: dict[int, Mark]
    states: dict[int, Resolution]


_KEPT: OrderedDict[Hashable, _Kept] = OrderedDict()
_LOCK = threading.Lock()


def fold_items(
    session: Session, queue: ReviewQueue, members: Sequence[int] | Select[Any]
) -> dict[int, Resolution]:
    """The resolution of the queue's label for ``members`` (ids or a subquery of ids)."""
    rows = latest_events(session, members, [queue.label_name])
    return {iid: res for (iid, _), (_, res) in fold(rows, queue.overlap_k).items()}


def _marks(session: Session, queue: ReviewQueue) -> list[tuple[int, int, int]]:
    # (instance id, events, highest event id) per item in queue order; (id, 0, 0) for an item
    # without events of the queue's label.
    q = (
        select(
            QueueItem.instance_id,
            func.count(LabelEvent.id),
            func.coalesce(func.max(LabelEvent.id), 0),
        )
        .outerjoin(
            LabelEvent,
            and_(
                LabelEvent.instance_id == QueueItem.instance_id,
                LabelEvent.label_name == queue.label_name,
            ),
        )
        .where(QueueItem.queue_id == queue.id)
        .group_by(QueueItem.instance_id, QueueItem.position)
        .order_by(QueueItem.position)
    )
    return [(int(i), int(n), int(top)) for i, n, top in session.execute(q)]


def _key(session: Session, queue: ReviewQueue) -> Hashable:
    # The URL and creation time keep another store's queue, or a deleted queue whose id was
    # given again, from sharing a key; the label and k are what the fold depends on.
    url = str(session.get_bind().engine.url)
    return (url, queue.id, str(queue.created_at), queue.label_name, queue.overlap_k)


def queue_states(session: Session, queue: ReviewQueue) -> QueueStates:
    """Every item of ``queue`` in queue order with its resolution, folded where it changed.

    Parameters
    ----------
    session : Session
        An open session; nothing is written. A read session keeps the fold for the next call.
    queue : ReviewQueue
        The queue.

    Returns
    -------
    QueueStates
        The item ids in queue order and ``{instance id: resolution}`` of those with events.

    """
    rows = _marks(session, queue)
    key = _key(session, queue)
    with _LOCK:
        kept = _KEPT.get(key)
        if kept is not None:
            _KEPT.move_to_end(key)
    old_marks, old_states = (kept.marks, kept.states) if kept is not None else ({}, {})
    marks: dict[int, Mark] = {}
    states: dict[int, Resolution] = {}
    changed: list[int] = []
    for iid, n, top in rows:
        mark = marks[iid] = (n, top)
        if old_marks.get(iid) == mark:
            if iid in old_states:
                states[iid] = old_states[iid]
        elif n:
            changed.append(iid)
    if len(changed) > FOLD_BY_IDS_UP_TO:
        members = select(QueueItem.instance_id).where(QueueItem.queue_id == queue.id)
        states.update(fold_items(session, queue, members))
    elif changed:
        states.update(fold_items(session, queue, changed))
    if not is_write_session(session):
        with _LOCK:
            _KEPT[key] = _Kept(marks, states)
            _KEPT.move_to_end(key)
            while len(_KEPT) > MAX_KEPT_QUEUES:
                _KEPT.popitem(last=False)
    # Read-only: the same dict is kept for the next request, in other threads too.
    return QueueStates([iid for iid, _, _ in rows], MappingProxyType(states))
