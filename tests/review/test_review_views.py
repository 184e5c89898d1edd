"""The blind-review rules in the service: who sees labels, votes, metadata and others' notes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput
from app.services.accounts.users import Principal, create_user
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.resolution import ADJUDICATION, VOTE
from app.services.review import queues, review_views
from app.services.review.queue_sources import member_ids
from app.services.review.review_actions import (
    NewQueue,
    comment_on_item,
    create_queue_from_source,
    reveal_item,
)
from app.tables import ReviewQueue, Role
from tests.support import factories as f


@dataclass(frozen=True)
class World:
    """A blind and an open queue of the same items; bob voted B on ``item``; both left a note."""

    blind: int
    open: int
    item: int
    n_items: int
    rita: Principal  # reviewer
    ann: Principal  # annotator
    bob: Principal  # annotator


def _principal(session: Session, name: str, role: Role) -> Principal:
    user = create_user(session, name, role.value)
    return Principal(user.id, user.name, role, token_id=0)


@pytest.fixture
def world(factory: sessionmaker[Session]) -> Iterator[World]:
    f.seed_benchmarks(factory)
    with transaction(factory) as session:
        rita = _principal(session, "rita", Role.reviewer)
        ann = _principal(session, "ann", Role.annotator)
        bob = _principal(session, "bob", Role.annotator)
        ids = {}
        for blind in (True, False):
            new = NewQueue(f.PAIRWISE, f"q-{blind}", "reference", "filter", blind=blind)
            ids[blind] = create_queue_from_source(session, new, rita.name).id
        n_items = len(member_ids(session, get_benchmark(session, f.PAIRWISE), "filter", ""))
        # Notes and votes belong to the instance and label set, so both queues show them.
        queue = queues.get_queue(session, ids[True])
        item = queues.next_item(session, queue, bob)
        assert item is not None
        comment_on_item(session, queue, item, bob, "bob thinks B")
        comment_on_item(session, queue, item, ann, "ann's own note")
        version = queues.label_version(session, item, "reference")
        queues.record(session, queue, item, bob, kind=VOTE, value="B", seen_version=version)
    yield World(ids[True], ids[False], item, n_items, rita, ann, bob)


def _queue(factory: sessionmaker[Session], queue_id: int) -> ReviewQueue:
    with transaction(factory) as session:
        return queues.get_queue(session, queue_id)


def _views(
    factory: sessionmaker[Session], world: World, queue_id: int, *people: Principal
) -> list[review_views.ItemView]:
    """How each of ``people`` sees ``world.item`` in the queue."""
    with transaction(factory) as session:
        queue = queues.get_queue(session, queue_id)
        return [review_views.item_view(session, queue, world.item, p) for p in people]


def _reveal(factory: sessionmaker[Session], world: World, who: Principal) -> None:
    with transaction(factory) as session:
        reveal_item(session, queues.get_queue(session, world.blind), world.item, who)


def test_sees_labels_in_open_queues_or_once_a_reviewer_reveals(
    world: World, factory: sessionmaker[Session]
) -> None:
    blind, open_ = _queue(factory, world.blind), _queue(factory, world.open)
    assert not review_views.sees_labels(blind, world.rita)
    assert review_views.sees_labels(blind, world.rita, revealed=True)
    assert not review_views.sees_labels(blind, world.ann, revealed=True)
    assert review_views.sees_labels(open_, world.ann)


def test_blind_item_view_hides_labels_metadata_and_others_notes_from_everyone(
    world: World, factory: sessionmaker[Session]
) -> None:
    ann, rita = _views(factory, world, world.blind, world.ann, world.rita)
    assert ann.texts and ann.texts == rita.texts
    for view in (ann, rita):
        assert view.resolution is None and view.fields == [] and not view.labels_shown
    assert [c.body for c in ann.comments] == ["ann's own note"]
    assert rita.comments == []
    # Counts of votes are no label: both see one standing vote, and neither has voted.
    assert (ann.n_votes, ann.own_vote) == (1, None) == (rita.n_votes, rita.own_vote)
    # Only the reviewer may reveal; the reveal is logged once, as a note under her name.
    assert rita.can_reveal and not ann.can_reveal
    with pytest.raises(queues.NotAssigned):
        _reveal(factory, world, world.ann)
    _reveal(factory, world, world.rita)
    _reveal(factory, world, world.rita)
    (rita,) = _views(factory, world, world.blind, world.rita)
    assert rita.resolution is not None and rita.resolution.votes == {"bob": "B"}
    assert rita.fields, "a reviewer who revealed sees the payload metadata"
    queue = _queue(factory, world.blind)
    logged = review_views.reveal_note(queue)
    assert [c.body for c in rita.comments] == ["bob thinks B", "ann's own note", logged]
    assert [c.author for c in rita.comments if c.body == logged] == ["rita"]
    assert not rita.can_reveal and rita.labels_shown
    # Annotators never read the reveal (nor anyone else's note) in the blind queue.
    (ann,) = _views(factory, world, world.blind, world.ann)
    assert [c.body for c in ann.comments] == ["ann's own note"]


def test_reveal_is_refused_in_an_open_queue(world: World, factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session, pytest.raises(InvalidInput, match="open"):
        reveal_item(session, queues.get_queue(session, world.open), world.item, world.rita)


def test_open_queue_shows_annotators_everything(
    world: World, factory: sessionmaker[Session]
) -> None:
    (ann,) = _views(factory, world, world.open, world.ann)
    assert ann.resolution is not None and ann.resolution.votes == {"bob": "B"}
    assert ann.fields and len(ann.comments) == 2


def test_rest_bodies_leave_out_what_blind_mode_hides(
    world: World, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as session:
        blind = queues.get_queue(session, world.blind)
        ann = review_views.item_state(session, blind, world.item, world.ann)
        bob = review_views.item_state(session, blind, world.item, world.bob)
        rita = review_views.item_state(session, blind, world.item, world.rita)
        ann_queue = review_views.queue_summary(session, blind, world.ann)
        rita_queue = review_views.queue_summary(session, blind, world.rita)
    basic = {"instance_id", "version", "own_vote", "n_votes"}
    assert ann.model_dump(exclude_unset=True).keys() == basic
    assert bob.model_dump(exclude_unset=True) == {
        "instance_id": world.item,
        "version": rita.version,
        "own_vote": "B",
        "n_votes": 1,
    }
    # Blind for the reviewer too until she reveals the item.
    assert rita.model_dump(exclude_unset=True).keys() == basic
    _reveal(factory, world, world.rita)
    with transaction(factory) as session:
        blind = queues.get_queue(session, world.blind)
        rita = review_views.item_state(session, blind, world.item, world.rita)
    shown = rita.model_dump(exclude_unset=True)
    assert shown.keys() == basic | {"original", "resolved", "rule", "votes", "adjudication"}
    assert (shown["votes"], shown["adjudication"]) == ({"bob": "B"}, None)
    decided = {"adjudicated", "unanimous"}
    assert not decided & ann_queue.progress.model_dump(exclude_unset=True).keys()
    assert decided <= rita_queue.progress.model_dump(exclude_unset=True).keys()
    assert ann_queue.progress.total == rita_queue.progress.total == world.n_items


def test_queue_page_gives_item_states_to_reviewers_only(
    world: World, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as session:
        version = queues.label_version(session, world.item, "reference")
        queue = queues.get_queue(session, world.open)
        queues.record(
            session, queue, world.item, world.rita,
            kind=ADJUDICATION, value="A", seen_version=version,
        )  # fmt: skip
    with transaction(factory) as session:
        ann = review_views.queue_page(session, world.open, world.ann)
        rita = review_views.queue_page(session, world.open, world.rita)
        agreement = review_views.queue_agreement_section(session, world.open, world.rita)
    assert ann.items == [] and len(rita.items) == world.n_items
    assert agreement.agreement["annotators"] and agreement.agreement["items"] == world.n_items
    decided = [row for row in rita.items if row.id == world.item]
    assert decided and decided[0].res is not None and decided[0].res.resolved == "A"


def test_assigned_queues_are_listed_to_their_annotators_only(
    world: World, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as session:
        queues.set_assignees(session, queues.get_queue(session, world.blind), ["bob"])
    with transaction(factory) as session:
        ann = [r.queue.id for r in review_views.visible_queues(session, world.ann)]
        bob = {r.queue.id: r.mine for r in review_views.visible_queues(session, world.bob)}
        rita = [r.queue.id for r in review_views.visible_queues(session, world.rita)]
    assert ann == [world.open]
    assert bob == {world.open: 1, world.blind: 1}
    assert sorted(rita) == sorted([world.blind, world.open])
