"""Which item a reviewer is sent to next: spread over the queue, never one they are done with.

On both databases: reviewers asking at once are sent to different items; the queue's order is
followed a window at a time, and in a window items with fewer votes come first; nobody is
offered an item they voted on (unless they withdrew the vote) or skipped, nor one that is
adjudicated or already has ``overlap_k`` votes; and after any mix of votes, withdrawals, skips
and adjudications the offered item is one the resolution rules
(:func:`app.services.review.queues.resolutions`) say still needs this reviewer's vote.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.accounts.users import Principal, create_user
from app.services.evidence.labels import append_label
from app.services.evidence.resolution import ADJUDICATION, VOTE
from app.services.review import queues
from app.tables import Benchmark, Instance, ReviewQueue, Role

N_ITEMS = 40
NAMES = ("ann", "bob", "cai", "dee", "eve", "fay")


@dataclass(frozen=True)
class Setup:
    """A queue of ``N_ITEMS`` items (k = 2) and the people who vote in it."""

    queue_id: int
    items: list[int]
    people: dict[str, Principal]


@pytest.fixture
def setup(factory: sessionmaker[Session]) -> Iterator[Setup]:
    with transaction(factory) as session:
        bench = Benchmark(name="spread", kind="pairwise", data_version=1)
        session.add(bench)
        session.flush()
        ids = []
        for i in range(N_ITEMS):
            inst = Instance(
                benchmark_id=bench.id,
                external_id=f"item-{i:03d}",
                group_key=f"g{i}",
                payload={"prompt": "Which?", "response_a": "a", "response_b": "b"},
            )
            session.add(inst)
            session.flush()
            append_label(session, inst.id, "reference", "AB"[i % 2], source="import")
            ids.append(inst.id)
        people = {
            name: Principal(user.id, name, role, token_id=0)
            for name, role in [(n, Role.annotator) for n in NAMES] + [("rita", Role.reviewer)]
            for user in [create_user(session, name, role.value)]
        }
        queue = queues.create_queue(
            session, bench, ids, name="spread", label_name="reference", source="filter",
            overlap_k=2, choices=["A", "B"],
        )  # fmt: skip
        queue_id = queue.id
    yield Setup(queue_id, ids, people)


def _queue(session: Session, setup: Setup) -> ReviewQueue:
    return queues.get_queue(session, setup.queue_id)


def _next(factory: sessionmaker[Session], setup: Setup, name: str) -> int | None:
    with transaction(factory) as session:
        return queues.next_item(session, _queue(session, setup), setup.people[name])


def _write(
    factory: sessionmaker[Session],
    setup: Setup,
    name: str,
    item: int,
    value: str | None,
    kind: str = VOTE,
) -> None:
    with transaction(factory) as session:
        queue = _queue(session, setup)
        version = queues.label_version(session, item, queue.label_name)
        queues.record(
            session, queue, item, setup.people[name], kind=kind, value=value,
            seen_version=version,
        )  # fmt: skip


def _skip(factory: sessionmaker[Session], setup: Setup, name: str, item: int) -> None:
    with transaction(factory) as session:
        queues.skip(session, _queue(session, setup), item, setup.people[name])


def test_reviewers_asking_at_once_are_sent_to_different_items(
    factory: sessionmaker[Session], setup: Setup
) -> None:
    firsts = [_next(factory, setup, name) for name in NAMES]
    assert None not in firsts
    assert len(set(firsts)) == len(NAMES)
    # Deterministic per reviewer: asking again (a reload) gives the same item.
    assert [_next(factory, setup, name) for name in NAMES] == firsts


def test_fewest_votes_first_and_never_an_item_one_is_done_with(
    factory: sessionmaker[Session], setup: Setup
) -> None:
    first = _next(factory, setup, "ann")
    assert first is not None
    _write(factory, setup, "ann", first, "A")
    # Others are sent to unvoted items while there are any; ann to another one.
    assert _next(factory, setup, "ann") not in (first, None)
    bob_first = _next(factory, setup, "bob")
    assert bob_first not in (first, None)
    # Bob votes ann's item too: two votes, k = 2, so nobody is sent there again.
    _write(factory, setup, "bob", first, "B")
    # Cai works through the whole queue: every item but the full one, each once.
    seen = []
    while (item := _next(factory, setup, "cai")) is not None:
        assert item not in seen
        seen.append(item)
        _write(factory, setup, "cai", item, "A")
    assert sorted(seen) == sorted(set(setup.items) - {first})


def test_skips_withdrawals_and_adjudications(factory: sessionmaker[Session], setup: Setup) -> None:
    item = _next(factory, setup, "ann")
    assert item is not None
    _skip(factory, setup, "ann", item)
    after_skip = _next(factory, setup, "ann")
    assert after_skip not in (item, None)
    # Skipping is personal: bob may still be sent to the item.
    _write(factory, setup, "ann", after_skip, "A")
    with transaction(factory) as session:
        undone = queues.undo_last_vote(session, _queue(session, setup), setup.people["ann"])
    assert undone == after_skip
    # A withdrawn vote does not count: the item is offered to ann again, first.
    assert _next(factory, setup, "ann") == after_skip
    # An adjudicated item needs no votes: nobody is sent there.
    _write(factory, setup, "rita", after_skip, None, kind=ADJUDICATION)
    offered = set()
    for name in NAMES:
        while (nxt := _next(factory, setup, name)) is not None:
            offered.add(nxt)
            _write(factory, setup, name, nxt, "B")
    assert after_skip not in offered
    assert item in offered
    with transaction(factory) as session:
        states = queues.resolutions(session, _queue(session, setup))
    assert all(queues.is_done(states.get(i), 2) for i in setup.items if i != item)


def _eligible(session: Session, queue: ReviewQueue, who: Principal, skipped: set[int]) -> dict:
    """``{item: standing votes}`` of the items ``who`` may vote on, by the resolution rules."""
    states = queues.resolutions(session, queue)
    out = {}
    for iid in queues.item_ids(session, queue):
        res = states.get(iid)
        if iid in skipped or (res is not None and who.name in res.votes):
            continue
        if not queues.is_done(res, queue.overlap_k):
            out[iid] = len(res.votes) if res is not None else 0
    return out


def test_the_offered_item_agrees_with_the_resolution_rules(
    factory: sessionmaker[Session], setup: Setup
) -> None:
    rng = random.Random(7)
    skipped: dict[str, set[int]] = {name: set() for name in NAMES}
    for _ in range(60):
        name = rng.choice(NAMES)
        who = setup.people[name]
        with transaction(factory) as session:
            queue = _queue(session, setup)
            offered = queues.next_item(session, queue, who)
            eligible = _eligible(session, queue, who, skipped[name])
        if offered is None:
            assert not eligible
            continue
        assert offered in eligible
        # The earliest window with an eligible item; in it, the fewest votes.
        window = {i: setup.items.index(i) // queues.SPREAD_WINDOW for i in eligible}
        first = min(window.values())
        assert window[offered] == first
        assert eligible[offered] == min(v for i, v in eligible.items() if window[i] == first)
        action = rng.random()
        if action < 0.6:
            _write(factory, setup, name, offered, rng.choice("AB"))
        elif action < 0.75:
            _skip(factory, setup, name, offered)
            skipped[name].add(offered)
        elif action < 0.9:
            with transaction(factory) as session:
                queues.undo_last_vote(session, _queue(session, setup), who)
        else:
            _write(factory, setup, "rita", offered, rng.choice("AB"), kind=ADJUDICATION)


def test_the_queue_order_is_followed_a_window_at_a_time(
    factory: sessionmaker[Session], setup: Setup
) -> None:
    """A ranked queue's most suspect items come first: spreading stays inside a window."""
    assert N_ITEMS > queues.SPREAD_WINDOW
    window = set(setup.items[: queues.SPREAD_WINDOW])
    assert all(_next(factory, setup, name) in window for name in NAMES)
    # Ann votes through the first window, then goes on in queue order to the rest.
    order = []
    while (item := _next(factory, setup, "ann")) is not None:
        order.append(item)
        _write(factory, setup, "ann", item, "A")
    assert set(order[: queues.SPREAD_WINDOW]) == window
    assert set(order[queues.SPREAD_WINDOW :]) == set(setup.items) - window
