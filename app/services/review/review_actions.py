"""Review writes that combine several services: a queue built from a page, notes, reveals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.attributes import attributes
from app.errors import InvalidInput
from app.services.accounts.users import Principal
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.comments import add_comment, thread
from app.services.review import queues
from app.services.review.queue_sources import DEFAULT_SIZE, member_ids
from app.services.review.review_views import has_revealed, reveal_note
from app.tables import Benchmark, Comment, Instance, ReviewQueue, Role


@dataclass(frozen=True)
class NewQueue:
    """A queue to build: which benchmark and source rows, the label set and how to review it."""

    benchmark: str
    name: str
    label: str
    source: str
    query: str = ""
    overlap_k: int = 2
    blind: bool = False
    instructions: str = ""
    assignees: Sequence[str] = ()
    # How many of the source's items the queue takes (the first ones, in the source's order).
    size: int = DEFAULT_SIZE
    # The defect tags its votes may carry (None: the benchmark kind's defaults).
    tags: Sequence[str] | None = None


# NewQueue's fields that create_queue takes under the same names.
_QUEUE_SETTINGS = (
    "name", "source", "query", "overlap_k", "blind", "instructions", "assignees", "tags",
)  # fmt: skip


def create_queue_from_source(session: Session, new: NewQueue, created_by: str) -> ReviewQueue:
    """Freeze the first ``new.size`` rows ``new.source`` and ``new.query`` list into a new queue.

    Raises
    ------
    NotFound
        No such benchmark.
    InvalidInput
        An unknown source, a query that matches nothing, a size out of range, or a setting
        :func:`app.services.review.queues.create_queue` refuses.

    """
    bench = get_benchmark(session, new.benchmark)
    return queues.create_queue(
        session,
        bench,
        member_ids(session, bench, new.source, new.query, new.size),
        label_name=new.label,
        created_by=created_by,
        **attributes(new, _QUEUE_SETTINGS),
    )


def comment_on_item(
    session: Session, queue: ReviewQueue, instance_id: int, principal: Principal, body: str
) -> Comment:
    """Add ``principal``'s note to an item of ``queue`` (InvalidInput if it is not in it)."""
    if not queues.in_queue(session, queue, instance_id):
        raise InvalidInput(f"instance {instance_id} is not in this queue", field="item")
    return add_comment(session, instance_id, principal.name, body)


def reveal_item(
    session: Session, queue: ReviewQueue, instance_id: int, principal: Principal
) -> Comment:
    """Log that reviewer ``principal`` reveals an item of blind ``queue``; the logging note.

    The reveal is a note on the item's thread (append-only, with author and time, read by
    other reviewers; blind annotators read their own notes only), so the queue's history says
    who decided an item after seeing its labels and votes. Revealing twice logs once.

    Raises
    ------
    NotAssigned
        ``principal`` is not a reviewer.
    InvalidInput
        The queue is open (nothing is hidden) or the instance is not in it.

    """
    if not principal.can(Role.reviewer):
        raise queues.NotAssigned("only reviewers may reveal an item of a blind queue")
    if not queue.blind:
        raise InvalidInput(f"queue {queue.name!r} is open: nothing is hidden", field="queue")
    if not queues.in_queue(session, queue, instance_id):
        raise InvalidInput(f"instance {instance_id} is not in this queue", field="item")
    logged = [c for c in thread(session, instance_id) if has_revealed(queue, principal, [c])]
    if logged:
        return logged[0]
    return add_comment(session, instance_id, principal.name, reveal_note(queue))


def comment_on_instance(
    session: Session, instance_id: int, principal: Principal, body: str
) -> tuple[str, str]:
    """Add ``principal``'s note to any instance; its benchmark name and external id.

    Raises
    ------
    NotFound
        No such instance.
    InvalidInput
        An empty or too long note.

    """
    add_comment(session, instance_id, principal.name, body)
    inst = session.get(Instance, instance_id)
    assert inst is not None
    bench = session.get(Benchmark, inst.benchmark_id)
    assert bench is not None
    return bench.name, inst.external_id
