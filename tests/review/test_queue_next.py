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

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.accounts.users import Principal
from app.services.evidence.resolution import ADJUDICATION
from app.services.review import queues
from app.tables import ReviewQueue
from tests.review.spread_queue import (
    N_ITEMS,
    NAMES,
    Setup,
    make_setup,
    next_for,
    queue_of,
    skip_item,
    write_review,
)


@pytest.fixture
def setup(factory: sessionmaker[Session]) -> Setup:
    return make_setup(factory)


def test_reviewers_asking_at_once_are_sent_to_different_items(
    factory: sessionmaker[Session], setup: Setup
) -> None:
    firsts = [next_for(factory, setup, name) for name in NAMES]
    assert None not in firsts
    assert len(set(firsts)) == len(NAMES)
    # Deterministic per reviewer: asking again (a reload) gives the same item.
    assert [next_for(factory, setup, name) for name in NAMES] == firsts


def test_fewest_votes_first_and_never_an_item_one_is_done_with(
    factory: sessionmaker[Session], setup: Setup
) -> None:
    first = next_for(factory, setup, "ann")
    assert first is not None
    write_review(factory, setup, "ann", first, "A")
    # Others are sent to unvoted items while there are any; ann to another one.
    assert next_for(factory, setup, "ann") not in (first, None)
    bob_first = next_for(factory, setup, "bob")
    assert bob_first not in (first, None)
    # Bob votes ann's item too: two votes, k = 2, so nobody is sent there again.
    write_review(factory, setup, "bob", first, "B")
    # Cai works through the whole queue: every item but the full one, each once.
    seen = []
    while (item := next_for(factory, setup, "cai")) is not None:
        assert item not in seen
        seen.append(item)
        write_review(factory, setup, "cai", item, "A")
    assert sorted(seen) == sorted(set(setup.items) - {first})


def test_skips_withdrawals_and_adjudications(factory: sessionmaker[Session], setup: Setup) -> None:
    item = next_for(factory, setup, "ann")
    assert item is not None
    skip_item(factory, setup, "ann", item)
    after_skip = next_for(factory, setup, "ann")
    assert after_skip not in (item, None)
    # Skipping is personal: bob may still be sent to the item.
    write_review(factory, setup, "ann", after_skip, "A")
    with transaction(factory) as session:
        undone = queues.undo_last_vote(session, queue_of(session, setup), setup.people["ann"])
    assert undone == after_skip
    # A withdrawn vote does not count: the item is offered to ann again, first.
    assert next_for(factory, setup, "ann") == after_skip
    # An adjudicated item needs no votes: nobody is sent there.
    write_review(factory, setup, "rita", after_skip, None, kind=ADJUDICATION)
    offered = set()
    for name in NAMES:
        while (nxt := next_for(factory, setup, name)) is not None:
            offered.add(nxt)
            write_review(factory, setup, name, nxt, "B")
    assert after_skip not in offered
    assert item in offered
    with transaction(factory) as session:
        states = queues.resolutions(session, queue_of(session, setup))
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
            queue = queue_of(session, setup)
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
            write_review(factory, setup, name, offered, rng.choice("AB"))
        elif action < 0.75:
            skip_item(factory, setup, name, offered)
            skipped[name].add(offered)
        elif action < 0.9:
            with transaction(factory) as session:
                queues.undo_last_vote(session, queue_of(session, setup), who)
        else:
            write_review(factory, setup, "rita", offered, rng.choice("AB"), kind=ADJUDICATION)


def test_the_queue_order_is_followed_a_window_at_a_time(
    factory: sessionmaker[Session], setup: Setup
) -> None:
    """A ranked queue's most suspect items come first: spreading stays inside a window."""
    assert N_ITEMS > queues.SPREAD_WINDOW
    window = set(setup.items[: queues.SPREAD_WINDOW])
    assert all(next_for(factory, setup, name) in window for name in NAMES)
    # Ann votes through the first window, then goes on in queue order to the rest.
    order = []
    while (item := next_for(factory, setup, "ann")) is not None:
        order.append(item)
        write_review(factory, setup, "ann", item, "A")
    assert set(order[: queues.SPREAD_WINDOW]) == window
    assert set(order[queues.SPREAD_WINDOW :]) == set(setup.items) - window
