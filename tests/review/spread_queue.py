"""A review queue to drive in tests: items of a pairwise benchmark, six annotators and a reviewer.

:func:`make_setup` builds it (k = 2, choices A/B, originals alternating); the other helpers ask
for the next item, vote, adjudicate and skip as the web routes do, each in its own transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.accounts.users import Principal, create_user
from app.services.evidence.labels import append_label
from app.services.evidence.resolution import VOTE
from app.services.review import queues
from app.tables import Benchmark, Instance, ReviewQueue, Role

N_ITEMS = 40
NAMES = ("ann", "bob", "cai", "dee", "eve", "fay")


@dataclass(frozen=True)
class Setup:
    """A queue (k = 2) and the people who vote in it."""

    queue_id: int
    items: list[int]
    people: dict[str, Principal]


def make_setup(factory: sessionmaker[Session], n_items: int = N_ITEMS) -> Setup:
    """A queue of ``n_items`` items (k = 2) and its people, written to the store."""
    with transaction(factory) as session:
        bench = Benchmark(name="spread", kind="pairwise", data_version=1)
        session.add(bench)
        session.flush()
        ids = []
        for i in range(n_items):
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
    return Setup(queue_id, ids, people)


def queue_of(session: Session, setup: Setup) -> ReviewQueue:
    """The setup's queue, read in ``session``."""
    return queues.get_queue(session, setup.queue_id)


def next_for(factory: sessionmaker[Session], setup: Setup, name: str) -> int | None:
    """The item ``name`` is sent to next (None: nothing left for them)."""
    with transaction(factory) as session:
        return queues.next_item(session, queue_of(session, setup), setup.people[name])


def write_review(
    factory: sessionmaker[Session],
    setup: Setup,
    name: str,
    item: int,
    value: str | None,
    kind: str = VOTE,
) -> None:
    """``name`` votes (or adjudicates) ``value`` on ``item``, on the version they see."""
    with transaction(factory) as session:
        queue = queue_of(session, setup)
        version = queues.label_version(session, item, queue.label_name)
        queues.record(
            session, queue, item, setup.people[name], kind=kind, value=value,
            seen_version=version,
        )  # fmt: skip


def skip_item(factory: sessionmaker[Session], setup: Setup, name: str, item: int) -> None:
    """``name`` skips ``item``."""
    with transaction(factory) as session:
        queues.skip(session, queue_of(session, setup), item, setup.people[name])
