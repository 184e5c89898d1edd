"""Rows picked on a list: a new queue of them, added to a queue, or marked as defects.

On both databases (issue 21 item 5): a new queue keeps the picked order; adding keeps the
queue's items and appends the others once; a defect mark is an adjudication of ``defect``
with its author, reason and tag, shown in the changelog, and marking twice appends nothing;
refusals (role, empty or foreign selection, no reason, unknown tag) write nothing.
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput, NotFound
from app.services.accounts.users import Principal, create_user
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.resolution import changelog, resolved_labels
from app.services.review import queues, selection
from app.services.review.queues import NotAssigned
from app.tables import Instance, LabelEvent, QueueItem, Role
from tests.support import factories as f


def _principal(factory: sessionmaker[Session], name: str, role: Role) -> Principal:
    with transaction(factory) as s:
        user = create_user(s, name, role.value)
        return Principal(user.id, user.name, role, token_id=0)


def _ids(factory: sessionmaker[Session], bench: str) -> list[int]:
    with factory() as s:
        b = get_benchmark(s, bench)
        q = select(Instance.id).where(Instance.benchmark_id == b.id).order_by(Instance.external_id)
        return list(s.scalars(q))


def _members(factory: sessionmaker[Session], queue_id: int) -> list[int]:
    with factory() as s:
        return queues.item_ids(s, queues.get_queue(s, queue_id))


def _count(factory: sessionmaker[Session], table: type) -> int:
    with factory() as s:
        return int(s.scalar(select(func.count()).select_from(table)) or 0)


def test_a_new_queue_of_the_picked_rows_keeps_their_order(
    factory: sessionmaker[Session],
) -> None:
    f.seed_benchmarks(factory)
    ids = _ids(factory, f.PAIRWISE)
    picked = [ids[2], ids[0], ids[2]]  # a repeat counts once
    with transaction(factory) as s:
        bench = get_benchmark(s, f.PAIRWISE)
        queue = selection.queue_selection(
            s, bench, picked, name=" picked ", label_name="reference",
            query="mode=label-errors", created_by="rita",
        )  # fmt: skip
        queue_id = queue.id
        assert (queue.name, queue.source, queue.query) == (
            "picked",
            "selection",
            "mode=label-errors",
        )
        assert queue.blind and queue.overlap_k == 2
    assert _members(factory, queue_id) == [ids[2], ids[0]]


def test_adding_to_a_queue_appends_the_new_items_once(factory: sessionmaker[Session]) -> None:
    f.seed_benchmarks(factory)
    ids = _ids(factory, f.PAIRWISE)
    with transaction(factory) as s:
        bench = get_benchmark(s, f.PAIRWISE)
        queue_id = selection.queue_selection(
            s, bench, [ids[1]], name="q", label_name="reference", query="", created_by="rita"
        ).id
    with transaction(factory) as s:
        bench = get_benchmark(s, f.PAIRWISE)
        queue, added = selection.add_to_queue(s, bench, queue_id, [ids[0], ids[1], ids[2]])
        assert (queue.id, added) == (queue_id, 2)
        assert [q.id for q in selection.benchmark_queues(s, bench)] == [queue_id]
    assert _members(factory, queue_id) == [ids[1], ids[0], ids[2]]
    with transaction(factory) as s:
        _, again = selection.add_to_queue(s, get_benchmark(s, f.PAIRWISE), queue_id, ids[:3])
    assert again == 0 and _members(factory, queue_id) == [ids[1], ids[0], ids[2]]


def test_a_queue_of_another_benchmark_or_foreign_items_are_refused(
    factory: sessionmaker[Session],
) -> None:
    f.seed_benchmarks(factory)
    ids = _ids(factory, f.PAIRWISE)
    foreign = _ids(factory, f.STATEMENTS)
    with transaction(factory) as s:
        queue_id = selection.queue_selection(
            s, get_benchmark(s, f.PAIRWISE), ids[:1], name="q", label_name="reference",
            query="", created_by="rita",
        ).id  # fmt: skip
    before = _count(factory, QueueItem)
    with pytest.raises(NotFound), transaction(factory) as s:
        selection.add_to_queue(s, get_benchmark(s, f.STATEMENTS), queue_id, foreign[:1])
    with pytest.raises(InvalidInput, match="not on"), transaction(factory) as s:
        selection.add_to_queue(s, get_benchmark(s, f.PAIRWISE), queue_id, [ids[1], foreign[0]])
    with pytest.raises(InvalidInput, match="select at least one"), transaction(factory) as s:
        selection.add_to_queue(s, get_benchmark(s, f.PAIRWISE), queue_id, [])
    with pytest.raises(InvalidInput, match="not on"), transaction(factory) as s:
        selection.queue_selection(
            s, get_benchmark(s, f.PAIRWISE), foreign[:1], name="other", label_name="reference",
            query="", created_by="rita",
        )  # fmt: skip
    assert _count(factory, QueueItem) == before


def test_a_defect_mark_is_an_adjudication_in_the_changelog(factory: sessionmaker[Session]) -> None:
    f.seed_benchmarks(factory)
    rita = _principal(factory, "rita", Role.reviewer)
    ids = _ids(factory, f.PAIRWISE)
    with transaction(factory) as s:
        bench = get_benchmark(s, f.PAIRWISE)
        marked = selection.mark_defects(
            s, bench, ids[:2], rita, reason="two right answers", tags=["ambiguous"]
        )
        assert marked == 2
    with factory() as s:
        bench = get_benchmark(s, f.PAIRWISE)
        assert selection.marked_defects(s, ids) == set(ids[:2])
        events = s.scalars(select(LabelEvent).where(LabelEvent.label_name == "defect")).all()
        resolved = resolved_labels(s, bench.id, "defect")
        rows = changelog(s, bench.id, ["defect"])
        external = {i.id: i.external_id for i in s.scalars(select(Instance))}
    assert [(e.source, e.value, e.author, e.reason, e.tags) for e in events] == [
        ("adjudication", "1", "rita", "two right answers", ["ambiguous"])
    ] * 2
    assert {iid: resolved[iid].resolved for iid in ids[:2]} == dict.fromkeys(ids[:2], "1")
    assert sorted((r.external_id, r.resolved, r.authors) for r in rows) == sorted(
        (external[i], "1", ("rita",)) for i in ids[:2]
    )
    # Marking again appends nothing; a withdrawn mark (adjudicated 0) can be marked again.
    before = _count(factory, LabelEvent)
    with transaction(factory) as s:
        assert (
            selection.mark_defects(s, get_benchmark(s, f.PAIRWISE), ids[:2], rita, reason="x") == 0
        )
    assert _count(factory, LabelEvent) == before
    with transaction(factory) as s:
        version = queues.label_version(s, ids[0], "defect")
        queues.append_event(
            s, ids[0], "defect", rita, kind="adjudication", value="0", seen_version=version,
            reason="not a defect", tags=[], allowed=[],
        )  # fmt: skip
    with factory() as s:
        assert selection.marked_defects(s, ids) == {ids[1]}
    with transaction(factory) as s:
        assert (
            selection.mark_defects(s, get_benchmark(s, f.PAIRWISE), ids[:2], rita, reason="y") == 1
        )


@pytest.mark.parametrize(
    ("role", "picked", "reason", "tags", "error"),
    [
        (Role.annotator, "own", "why", [], NotAssigned),
        (Role.reviewer, "none", "why", [], InvalidInput),
        (Role.reviewer, "foreign", "why", [], InvalidInput),
        (Role.reviewer, "own", "  ", [], InvalidInput),
        (Role.reviewer, "own", "why", ["not a tag"], InvalidInput),
        (Role.reviewer, "own", "x" * (queues.MAX_REASON + 1), [], InvalidInput),
    ],
)
def test_a_refused_mark_writes_nothing(
    factory: sessionmaker[Session],
    role: Role,
    picked: str,
    reason: str,
    tags: list[str],
    error: type[Exception],
) -> None:
    f.seed_benchmarks(factory)
    who = _principal(factory, "someone", role)
    ids = {
        "own": _ids(factory, f.PAIRWISE)[:2],
        "none": [],
        "foreign": _ids(factory, f.STATEMENTS)[:1],
    }[picked]
    before = _count(factory, LabelEvent)
    with pytest.raises(error), transaction(factory) as s:
        selection.mark_defects(s, get_benchmark(s, f.PAIRWISE), ids, who, reason=reason, tags=tags)
    assert _count(factory, LabelEvent) == before
