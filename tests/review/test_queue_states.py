"""Queue states kept between pages: what a fresh fold gives, folded again only where items changed.

On both databases: after every vote, withdrawal and adjudication of a random sequence (and after
the queue is re-ordered), :func:`~app.services.review.queue_states.queue_states` equals a fresh
fold of the whole queue, in queue order; the queue page folds the queue once, then nothing while
no item changes, then only the item a vote changed (it folded the whole queue twice per view
before); a SQLite write session keeps nothing (a rolled-back event's id is given again there),
a PostgreSQL one may.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import Engine, delete, insert
from sqlalchemy.orm import Session, sessionmaker

from app.db import immediate, is_sqlite, session_factory, transaction
from app.services.evidence.resolution import ADJUDICATION, VOTE
from app.services.review import queue_states as kept_module
from app.services.review import queues, review_views
from app.services.review.queue_states import queue_states
from app.tables import QueueItem
from tests.review.spread_queue import NAMES, Setup, make_setup, queue_of, write_review


@pytest.fixture
def setup(factory: sessionmaker[Session]) -> Setup:
    return make_setup(factory, n_items=30)


@pytest.fixture
def folded(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each fold of the queue-states module read: a list of ids, or "queue" for all."""
    calls: list[Any] = []
    real = kept_module.fold_items

    def spy(session: Session, queue: Any, members: Sequence[int] | Any) -> Any:
        calls.append(sorted(members) if isinstance(members, list) else "queue")
        return real(session, queue, members)

    monkeypatch.setattr(kept_module, "fold_items", spy)
    return calls


def _check_fresh(factory: sessionmaker[Session], setup: Setup) -> None:
    with transaction(factory) as session:
        queue = queue_of(session, setup)
        kept = queue_states(session, queue)
        assert kept.ids == queues.item_ids(session, queue)
        assert dict(kept.states) == queues.resolutions(session, queue)


def test_kept_states_equal_a_fresh_fold_after_every_write(
    factory: sessionmaker[Session], setup: Setup
) -> None:
    rng = random.Random(7)
    _check_fresh(factory, setup)
    for _ in range(40):
        item = rng.choice(setup.items[:12])
        roll = rng.random()
        if roll < 0.15:
            write_review(factory, setup, "rita", item, rng.choice(["A", "B", None]), ADJUDICATION)
        else:
            # A null vote withdraws the author's vote.
            value = None if roll < 0.3 else rng.choice(["A", "B"])
            write_review(factory, setup, rng.choice(NAMES), item, value, VOTE)
        _check_fresh(factory, setup)
    # Re-ordered (as a ranker does): the same states in the new order.
    with transaction(factory) as session:
        session.execute(delete(QueueItem).where(QueueItem.queue_id == setup.queue_id))
        rows = [
            {"queue_id": setup.queue_id, "instance_id": iid, "position": p}
            for p, iid in enumerate(reversed(setup.items))
        ]
        session.execute(insert(QueueItem), rows)
    _check_fresh(factory, setup)


def test_the_queue_page_folds_only_what_changed(
    factory: sessionmaker[Session], setup: Setup, folded: list[Any]
) -> None:
    rita = setup.people["rita"]

    def view() -> review_views.QueuePage:
        with transaction(factory) as session:
            return review_views.queue_page(session, setup.queue_id, rita)

    first = view()
    assert len(folded) == 1 and first.progress.total == 30
    view()
    assert len(folded) == 1, "nothing changed: nothing folded again"
    item = setup.items[3]
    write_review(factory, setup, "ann", item, "B")
    page = view()
    assert folded[1:] == [[item]]
    assert page.progress.votes_by_person == {"ann": 1}
    assert next(row.res for row in page.items if row.id == item).votes == {"ann": "B"}


def test_a_sqlite_write_session_keeps_nothing(
    engine: Engine, factory: sessionmaker[Session], setup: Setup, folded: list[Any]
) -> None:
    writer = session_factory(immediate(engine))
    with transaction(writer) as session:
        queue_states(session, queue_of(session, setup))
    with transaction(factory) as session:
        queue_states(session, queue_of(session, setup))
    # SQLite: the read folds the queue again; PostgreSQL ids are never given twice, so the
    # write session's fold was kept and the read folds nothing.
    assert len(folded) == (2 if is_sqlite(engine) else 1)
