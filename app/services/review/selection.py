"""What a reviewer does with items picked on a list: queue them, or mark them as defects.

The label-errors list (and every disagreements list) lets a reviewer tick rows and send them
to a new queue, add them to an existing queue of the benchmark, or mark them as defects. A
defect mark is what a queue's adjudication of the ``defect`` label set would be: an
append-only adjudication event ``defect = 1`` with its author, reason and taxonomy tags, so
it shows in the changelog and the defect report, and the rankers' resolved defect labels
count it.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from app.errors import InvalidInput, NotFound
from app.services.accounts.users import Principal
from app.services.evidence.resolution import ADJUDICATION
from app.services.metrics.rankers import DEFAULT_TRAIN_LABEL as DEFECT_LABEL
from app.services.review import queues
from app.tables import Benchmark, Instance, LabelEvent, QueueItem, ReviewQueue, Role

__all__ = [
    "DEFECT_LABEL",
    "DEFECT_VALUE",
    "MAX_SELECTED",
    "add_to_queue",
    "benchmark_queues",
    "mark_defects",
    "marked_defects",
    "queue_selection",
]

DEFECT_VALUE = "1"
"""The ``defect`` label set's value for "this item is defective" (MMLU-Redux's vocabulary)."""
MAX_SELECTED = 1000
"""Most items one submission takes (a page lists 100; the bound keeps one request small)."""


def _selected(session: Session, bench: Benchmark, instance_ids: Sequence[int]) -> list[int]:
    """``instance_ids`` without repeats, in their order, checked to be items of ``bench``."""
    ids = list(dict.fromkeys(instance_ids))
    if not ids:
        raise InvalidInput("select at least one item", field="item")
    if len(ids) > MAX_SELECTED:
        raise InvalidInput(f"select at most {MAX_SELECTED} items at once", field="item")
    found = set(
        session.scalars(
            select(Instance.id).where(Instance.benchmark_id == bench.id, Instance.id.in_(ids))
        )
    )
    stray = [i for i in ids if i not in found]
    if stray:
        raise InvalidInput(
            f"{len(stray)} selected item(s) are not on {bench.name}, e.g. id {stray[0]}",
            field="item",
        )
    return ids


def benchmark_queues(session: Session, bench: Benchmark) -> list[ReviewQueue]:
    """The queues of ``bench``, newest first (what a selection can be added to)."""
    q = (
        select(ReviewQueue)
        .where(ReviewQueue.benchmark_id == bench.id)
        .order_by(ReviewQueue.id.desc())
    )
    return list(session.scalars(q))


def queue_selection(
    session: Session,
    bench: Benchmark,
    instance_ids: Sequence[int],
    *,
    name: str,
    label_name: str,
    query: str,
    created_by: str,
) -> ReviewQueue:
    """A new queue on ``label_name`` of the selected items, in the order they were listed.

    Blind, two annotators per item (the new-queue form's defaults); ``query`` records the
    list the items were picked from. Raises InvalidInput as
    :func:`app.services.review.queues.create_queue` does, or for a selection that is empty,
    too long or holds items of another benchmark.
    """
    ids = _selected(session, bench, instance_ids)
    return queues.create_queue(
        session, bench, ids, name=name, label_name=label_name, source="selection",
        query=query, overlap_k=2, blind=True, created_by=created_by,
    )  # fmt: skip


def add_to_queue(
    session: Session, bench: Benchmark, queue_id: int, instance_ids: Sequence[int]
) -> tuple[ReviewQueue, int]:
    """Append the selected items to queue ``queue_id`` of ``bench``; the queue and how many.

    Items already in the queue stay where they are; the others follow its last item in the
    order given. The queue's row is locked first (PostgreSQL; SQLite's write transaction
    serialises anyway), so two selections added at once both land, each item once.

    Raises
    ------
    NotFound
        No such queue on ``bench``.
    InvalidInput
        An empty or too long selection, or items of another benchmark.

    """
    queue = session.scalar(
        select(ReviewQueue)
        .where(ReviewQueue.id == queue_id, ReviewQueue.benchmark_id == bench.id)
        .with_for_update()
    )
    if queue is None:
        raise NotFound(f"no queue {queue_id} on {bench.name}")
    ids = _selected(session, bench, instance_ids)
    present = set(
        session.scalars(
            select(QueueItem.instance_id).where(
                QueueItem.queue_id == queue.id, QueueItem.instance_id.in_(ids)
            )
        )
    )
    new = [i for i in ids if i not in present]
    last = session.scalar(
        select(func.max(QueueItem.position)).where(QueueItem.queue_id == queue.id)
    )
    start = -1 if last is None else int(last)
    if new:
        session.execute(
            insert(QueueItem),
            [
                {"queue_id": queue.id, "instance_id": iid, "position": start + 1 + i}
                for i, iid in enumerate(new)
            ],
        )
    return queue, len(new)


def mark_defects(
    session: Session,
    bench: Benchmark,
    instance_ids: Sequence[int],
    principal: Principal,
    *,
    reason: str,
    tags: Sequence[str] = (),
) -> int:
    """Adjudicate ``defect = 1`` on each selected item; how many were newly marked.

    Each mark is appended at the item's current version (a mark is the same whatever came
    before it, so there is no stale state to refuse); an item whose latest adjudication of
    ``defect`` is already a mark is left alone, so marking twice appends nothing. A benchmark
    without a ``defect`` label set gets one through these events.

    Raises
    ------
    NotAssigned
        ``principal`` is not a reviewer (or an admin).
    InvalidInput
        An empty or too long selection, items of another benchmark, no reason, a long
        reason or an unknown tag.

    """
    if not principal.can(Role.reviewer):
        raise queues.NotAssigned("marking defects needs the reviewer role")
    if not reason.strip():
        raise InvalidInput("say why the items are defects", field="reason")
    ids = _selected(session, bench, instance_ids)
    allowed = queues.benchmark_tags(session, bench)  # the tags a relabel may carry too
    already = marked_defects(session, ids)
    marked = 0
    for iid in ids:
        if iid in already:
            continue
        version = queues.label_version(session, iid, DEFECT_LABEL)
        queues.append_event(
            session, iid, DEFECT_LABEL, principal,
            kind=ADJUDICATION, value=DEFECT_VALUE, seen_version=version, reason=reason,
            tags=tags, allowed=allowed,
        )  # fmt: skip
        marked += 1
    return marked


def marked_defects(session: Session, instance_ids: Sequence[int]) -> set[int]:
    """The ids among ``instance_ids`` whose latest ``defect`` adjudication marks a defect."""
    ids = list(instance_ids)
    if not ids:
        return set()
    latest = (
        select(func.max(LabelEvent.id))
        .where(
            LabelEvent.instance_id.in_(ids),
            LabelEvent.label_name == DEFECT_LABEL,
            LabelEvent.source == ADJUDICATION,
        )
        .group_by(LabelEvent.instance_id)
    )
    q = select(LabelEvent.instance_id).where(
        LabelEvent.id.in_(latest), LabelEvent.value == DEFECT_VALUE
    )
    return set(session.scalars(q))
