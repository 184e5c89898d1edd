"""Review queues: frozen item lists that annotators vote on and reviewers adjudicate.

Votes and adjudications are label events (sources ``vote`` and ``adjudication``), so history is
never rewritten: undoing a vote appends a withdrawal (a null vote). Every write states the
version of the item's label it saw (the highest label-event id of that instance and label set);
a write against a newer version is refused with :class:`StaleWrite`, checked and appended under
a lock on the instance, so two people racing on one item never lose an event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from app.attributes import attributes
from app.errors import Conflict, InvalidInput, NotFound
from app.services.accounts.users import Principal
from app.services.evidence.answer_matrix import ANSWER_LABEL
from app.services.evidence.benchmarks import bump_data_version
from app.services.evidence.labels import label_event_values, label_names
from app.services.evidence.outcomes import UNANSWERABLE, is_unanswerable
from app.services.evidence.resolution import ADJUDICATION, VOTE, Resolution
from app.services.review.queue_states import QueueStates, fold_items, queue_states
from app.services.table.facets import BenchmarkFacets, benchmark_facets, stored_facets
from app.sql.dialect_insert import dialect_insert
from app.sql.lookup import get_one
from app.tables import (
    Benchmark,
    BenchmarkKind,
    Instance,
    LabelEvent,
    QueueAssignment,
    QueueItem,
    QueueSkip,
    ReviewQueue,
    Role,
    User,
)

# The defect tags a new queue offers by benchmark kind; its form may change them.
_PAIR_TAGS = ("wrong reference", "ambiguous", "both wrong", "duplicate", "truncated/broken")
_TEXT_TAGS = ("wrong reference", "ambiguous", "duplicate", "truncated/broken")
KIND_TAGS: dict[str, tuple[str, ...]] = {
    BenchmarkKind.pairwise: (*_PAIR_TAGS, "other"),
    # Lie-detector statements and responses: a persona the model was told to adopt.
    BenchmarkKind.response: (*_TEXT_TAGS, "persona not adopted", "other"),
    BenchmarkKind.statement: (*_TEXT_TAGS, "persona not adopted", "other"),
    # The MMLU-Redux error taxonomy (Gema et al., 2024), which the errata export maps back to
    # its error types (app.ingest.export.error_types).
    BenchmarkKind.choice: (
        "wrong ground truth",
        "no correct answer",
        "multiple correct answers",
        "bad question clarity",
        "bad options clarity",
        "needs expertise",
        "other",
    ),
    BenchmarkKind.answer: (
        "wrong ground truth",
        "no correct answer",
        "multiple correct answers",
        "bad question clarity",
        "needs expertise",
        "other",
    ),
}
# A queue's tags are checkboxes on every item page: a screenful at most, each a short phrase.
MAX_TAGS = 20
MAX_TAG_LENGTH = 60
# Keys 1-9 pick a value; more choices than that cannot be voted by keyboard alone.
MAX_CHOICES = 9
MAX_REASON = 2000
# A typed value is stored as a label value: as long as that column allows.
MAX_LABEL_LENGTH: int = LabelEvent.__table__.c.value.type.length


class StaleWrite(Conflict):
    """The item's label changed since the writer saw it (HTTP 409)."""

    def __init__(self, instance_id: int, seen: int, current: int) -> None:
        super().__init__(
            f"this item changed since you opened it (you saw version {seen}, it is now "
            f"{current}); nothing was saved — check the current state and decide again"
        )
        self.instance_id = instance_id
        self.seen = seen
        self.current = current


class NotAssigned(Exception):
    """The user may not work in this queue (HTTP 403)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a queue is: items done (``k`` standing votes or an adjudication) and by whom."""

    total: int
    complete: int
    adjudicated: int
    unanimous: int
    votes_by_person: dict[str, int] = field(default_factory=dict)
    skips_by_person: dict[str, int] = field(default_factory=dict)


def get_queue(session: Session, queue_id: int) -> ReviewQueue:
    """The queue with id ``queue_id``, else NotFound."""
    return get_one(session, ReviewQueue, f"no review queue {queue_id}", id=queue_id)


def get_queue_for(session: Session, queue_id: int, principal: Principal) -> ReviewQueue:
    """The queue with id ``queue_id`` if ``principal`` may work in it.

    Raises
    ------
    NotFound
        No such queue.
    NotAssigned
        ``principal`` may not work in it (see :func:`may_work`).

    """
    queue = get_queue(session, queue_id)
    check_may_work(session, queue, principal)
    return queue


def list_queues(session: Session) -> list[tuple[ReviewQueue, str, int]]:
    """Every queue with its benchmark name and item count, newest first."""
    counts = (
        select(QueueItem.queue_id, func.count().label("n")).group_by(QueueItem.queue_id).subquery()
    )
    q = (
        select(ReviewQueue, Benchmark.name, func.coalesce(counts.c.n, 0))
        .join(Benchmark, Benchmark.id == ReviewQueue.benchmark_id)
        .outerjoin(counts, counts.c.queue_id == ReviewQueue.id)
        .order_by(ReviewQueue.id.desc())
    )
    return [(queue, name, int(n)) for queue, name, n in session.execute(q)]


def create_queue(
    session: Session,
    benchmark: Benchmark,
    instance_ids: Sequence[int],
    *,
    name: str,
    label_name: str,
    source: str,
    query: str = "",
    overlap_k: int = 2,
    blind: bool = True,
    instructions: str = "",
    created_by: str = "",
    assignees: Sequence[str] = (),
    choices: Sequence[str] | None = None,
    tags: Sequence[str] | None = None,
) -> ReviewQueue:
    """Freeze ``instance_ids`` (in that order) into a new queue on ``label_name``.

    ``tags`` are the defect tags its votes may carry (None: the benchmark kind's
    :func:`default_tags`); ``choices`` the values (None: :func:`default_choices`).

    Raises
    ------
    InvalidInput
        No items, a blank or taken name, ``overlap_k`` below 1, more than nine choices,
        tags :func:`check_tags` refuses, or an unknown assignee.

    """
    name = name.strip()
    if not name:
        raise InvalidInput("give the queue a name", field="name")
    if isinstance(overlap_k, bool) or overlap_k < 1:
        raise InvalidInput(f"overlap k must be >= 1, got {overlap_k}", field="overlap_k")
    ids = list(dict.fromkeys(instance_ids))
    if not ids:
        raise InvalidInput("the queue's source matches no instance", field="query")
    taken = session.scalar(
        select(ReviewQueue.id).where(
            ReviewQueue.benchmark_id == benchmark.id, ReviewQueue.name == name
        )
    )
    if taken is not None:
        raise InvalidInput(f"{benchmark.name} already has a queue named {name!r}", field="name")
    values = list(choices) if choices else default_choices(session, benchmark, label_name)
    if not values:
        raise InvalidInput(
            f"label set {label_name!r} has no values on {benchmark.name}", field="label"
        )
    if len(values) > MAX_CHOICES:
        raise InvalidInput(
            f"label set {label_name!r} has {len(values)} values; a queue offers at most "
            f"{MAX_CHOICES} (keys 1-9)",
            field="label",
        )
    offered = check_tags(tags) if tags is not None else default_tags(benchmark.kind)
    users = _users_named(session, assignees)
    queue = ReviewQueue(
        benchmark_id=benchmark.id,
        name=name,
        label_name=label_name,
        source=source,
        query=query,
        overlap_k=overlap_k,
        blind=blind,
        choices=values,
        tags=offered,
        instructions=instructions,
        created_by=created_by,
    )
    session.add(queue)
    session.flush()
    session.execute(
        insert(QueueItem),
        [{"queue_id": queue.id, "instance_id": iid, "position": i} for i, iid in enumerate(ids)],
    )
    if users:
        session.execute(
            insert(QueueAssignment), [{"queue_id": queue.id, "user_id": u.id} for u in users]
        )
    return queue


def default_choices(
    session: Session,
    benchmark: Benchmark,
    label_name: str,
    facets: BenchmarkFacets | None = None,
) -> list[str]:
    """What a new queue on ``label_name`` lets people choose from.

    On choice benchmarks' ``reference``: the option letters, then the :data:`UNANSWERABLE`
    outcomes; on answer benchmarks' ``reference``: the outcomes (a corrected answer is typed).
    Otherwise the label set's current values, or, for a label set people voted on but that
    has no original (imported human judgments), the values of its votes. The values come from
    ``facets`` (a request's, from its memo), else the kept ones: scanning a million-item
    benchmark for them took 2-7 s on every instance page.
    """
    if label_name == ANSWER_LABEL and benchmark.kind == BenchmarkKind.answer:
        return list(UNANSWERABLE)
    if facets is None:
        facets = stored_facets(session, benchmark) or benchmark_facets(session, benchmark)
    facet = facets.label_set(label_name)
    values = [v.value for v in facet.values if v.value is not None] if facet else []
    if not values:
        values = label_event_values(session, benchmark.id, label_name)
    if label_name == ANSWER_LABEL and benchmark.kind == BenchmarkKind.choice:
        letters = [v for v in values if not is_unanswerable(v)]
        return [*sorted(letters), *UNANSWERABLE]
    return values


def default_tags(kind: str) -> list[str]:
    """The defect tags a new queue on a benchmark of ``kind`` offers (:data:`KIND_TAGS`)."""
    return list(KIND_TAGS.get(kind, ("other",)))


def check_tags(tags: Sequence[str]) -> list[str]:
    """``tags`` stripped, blanks and repeats dropped, in their order; InvalidInput if unfit.

    Raises
    ------
    InvalidInput
        More than :data:`MAX_TAGS` tags, one longer than :data:`MAX_TAG_LENGTH` characters,
        or one with a control character (a line break would split it on the form; PostgreSQL's
        JSON refuses NUL).

    """
    kept = list(dict.fromkeys(t.strip() for t in tags if t.strip()))
    if len(kept) > MAX_TAGS:
        raise InvalidInput(f"a queue offers at most {MAX_TAGS} tags, got {len(kept)}", field="tags")
    for tag in kept:
        if len(tag) > MAX_TAG_LENGTH:
            raise InvalidInput(
                f"a tag has at most {MAX_TAG_LENGTH} characters: {tag[:MAX_TAG_LENGTH]!r}...",
                field="tags",
            )
        if any(ord(c) < 32 or ord(c) == 127 for c in tag):
            raise InvalidInput(f"tag {tag!r} has a control character", field="tags")
    return kept


def queue_tags(queue: ReviewQueue, kind: str) -> list[str]:
    """The defect tags ``queue`` (on a benchmark of ``kind``) offers."""
    return [str(t) for t in queue.tags] if queue.tags is not None else default_tags(kind)


def benchmark_tags(session: Session, bench: Benchmark) -> list[str]:
    """Every tag the benchmark's queues offer, first queue first (no queue: the defaults)."""
    rows = session.scalars(
        select(ReviewQueue).where(ReviewQueue.benchmark_id == bench.id).order_by(ReviewQueue.id)
    )
    found = [t for q in rows for t in queue_tags(q, bench.kind)]
    return list(dict.fromkeys(found)) if found else default_tags(bench.kind)


def takes_typed_answers(benchmark: Benchmark, label_name: str) -> bool:
    """Whether votes may type a value (a corrected reference answer) besides the choices."""
    return label_name == ANSWER_LABEL and benchmark.kind == BenchmarkKind.answer


def _users_named(session: Session, names: Sequence[str]) -> list[User]:
    wanted = [n.strip() for n in names if n.strip()]
    found = {u.name: u for u in session.scalars(select(User).where(User.name.in_(wanted)))}
    missing = [n for n in wanted if n not in found]
    if missing:
        raise InvalidInput(f"no user named {', '.join(missing)}", field="assignees")
    return [found[n] for n in dict.fromkeys(wanted)]


def assignees(session: Session, queue: ReviewQueue) -> list[str]:
    """Names of the people assigned to a queue (empty: open to every annotator)."""
    q = (
        select(User.name)
        .join(QueueAssignment, QueueAssignment.user_id == User.id)
        .where(QueueAssignment.queue_id == queue.id)
        .order_by(User.name)
    )
    return list(session.scalars(q))


def set_assignees(session: Session, queue: ReviewQueue, names: Sequence[str]) -> None:
    """Replace the queue's assignments."""
    users = _users_named(session, names)
    session.execute(delete(QueueAssignment).where(QueueAssignment.queue_id == queue.id))
    if users:
        session.execute(
            insert(QueueAssignment), [{"queue_id": queue.id, "user_id": u.id} for u in users]
        )


def may_work(session: Session, queue: ReviewQueue, principal: Principal) -> bool:
    """Whether ``principal`` may vote in ``queue``.

    Reviewers always may; annotators if assigned, or if nobody is.
    """
    if principal.can(Role.reviewer):
        return True
    names = assignees(session, queue)
    return not names or principal.name in names


def check_may_work(session: Session, queue: ReviewQueue, principal: Principal) -> None:
    """Raise NotAssigned unless ``principal`` may vote in ``queue``."""
    if not may_work(session, queue, principal):
        raise NotAssigned(f"{principal.name} is not assigned to queue {queue.name!r}")


def item_ids(session: Session, queue: ReviewQueue) -> list[int]:
    """The queue's instance ids in queue order."""
    q = (
        select(QueueItem.instance_id)
        .where(QueueItem.queue_id == queue.id)
        .order_by(QueueItem.position)
    )
    return list(session.scalars(q))


def resolutions(
    session: Session, queue: ReviewQueue, ids: Sequence[int] | None = None
) -> dict[int, Resolution]:
    """The resolution of the queue's label for its items (or ``ids``), with k = overlap k.

    Folded afresh: what a write reads. Pages read
    :func:`~app.services.review.queue_states.queue_states`, which folds again only the items
    whose events changed since the last page.
    """
    members = (
        select(QueueItem.instance_id).where(QueueItem.queue_id == queue.id)
        if ids is None
        else list(ids)
    )
    return fold_items(session, queue, members)


def in_queue(session: Session, queue: ReviewQueue, instance_id: int) -> bool:
    """Whether the instance belongs to the queue."""
    q = select(QueueItem.id).where(
        QueueItem.queue_id == queue.id, QueueItem.instance_id == instance_id
    )
    return session.scalar(q) is not None


def is_done(res: Resolution | None, k: int) -> bool:
    """Whether an item needs no more votes: adjudicated, or ``k`` standing votes."""
    return res is not None and (res.adjudication is not None or len(res.votes) >= k)


# Each reviewer takes the open items in an order of their own, a pseudo-random permutation
# of the queue drawn from their user id, so reviewers working at once open different items (a
# vote on an item that changed since it was opened is refused as stale) and one reviewer
# asking again is sent to the same item. A fixed formula, not Python's hash (salted per
# process: every server process must send a reviewer to the same item): x, a multiplicative
# hash of the item shifted by the user's, then x squared modulo a prime; squaring makes the
# orders of different users unrelated (with a shift alone they would all walk one ring and
# catch up with each other).
_PRIME = 2**31 - 1
_ITEM_MIX = 1_327_217_885  # round(2**31 / golden ratio): consecutive ids land far apart
_USER_MIX = 1_103_515_245  # any other constant in (0, _PRIME) would do


SPREAD_WINDOW = 32
"""Queue positions reviewers are spread over at a time (more than a team votes on at once)."""


def _spread_place(user_id: int, instance_id: int) -> int:
    """The place of an item in ``user_id``'s own order (smallest first)."""
    shift = (user_id % _PRIME) * _USER_MIX % _PRIME
    x = ((instance_id % _PRIME) * _ITEM_MIX + shift) % _PRIME
    return x * x % _PRIME


def next_item(
    session: Session, queue: ReviewQueue, principal: Principal, kept: QueueStates | None = None
) -> int | None:
    """The item ``principal`` should vote on next (or None when none is left to them).

    Offered: an item of the queue they have neither voted on (a withdrawn vote does not
    count) nor skipped, that is not adjudicated and has fewer than ``overlap_k`` standing
    votes. The queue's order (a ranking, for a queue built from one) is followed a window of
    :data:`SPREAD_WINDOW` items at a time, so the most suspect items are reviewed first; in
    the window, one with the fewest votes, so reviewers spread instead of racing for the same
    item (the second vote on it would be stale: 409); among equals, the first in the
    reviewer's own order (:func:`_spread_place`), so two reviewers asking at once are sent to
    different items, and one reviewer asking again (after an undo, a reload) to the same one.

    Read from the queue's kept states (``kept`` where the caller has them): counting every
    standing vote in SQL took 80-180 ms at 3,500 votes on PostgreSQL, whose planner expects
    one voted item and joins the queue against them in a loop.
    """
    kept = kept if kept is not None else queue_states(session, queue)
    skipped = set(
        session.scalars(
            select(QueueSkip.instance_id).where(
                QueueSkip.queue_id == queue.id, QueueSkip.user_id == principal.user_id
            )
        )
    )
    best: tuple[int, int, int, int] | None = None
    found = None
    for place, iid in enumerate(kept.ids):
        window = place // SPREAD_WINDOW
        if best is not None and window > best[0]:
            break  # an earlier window has an item: later ones come after it
        res = kept.states.get(iid)
        if iid in skipped or is_done(res, queue.overlap_k):
            continue
        votes = res.votes if res is not None else {}
        if principal.name in votes:
            continue
        key = (window, len(votes), _spread_place(principal.user_id, iid), place)
        if best is None or key < best:
            best, found = key, iid
    return found


def progress(session: Session, queue: ReviewQueue, kept: QueueStates | None = None) -> Progress:
    """Items done and votes per person (standing votes: withdrawals do not count).

    ``kept``: the queue's states where the caller has read them already.
    """
    kept = kept if kept is not None else queue_states(session, queue)
    states, ids = kept.states, kept.ids
    by_person: dict[str, int] = {}
    complete = adjudicated = unanimous = 0
    for iid in ids:
        res = states.get(iid)
        if res is None:
            continue
        for author in res.votes:
            by_person[author] = by_person.get(author, 0) + 1
        complete += is_done(res, queue.overlap_k)
        adjudicated += res.adjudication is not None
        unanimous += res.rule == "unanimous-votes"
    skips = dict(
        session.execute(
            select(User.name, func.count())
            .join(QueueSkip, QueueSkip.user_id == User.id)
            .where(QueueSkip.queue_id == queue.id)
            .group_by(User.name)
        ).all()
    )
    return Progress(
        total=len(ids),
        complete=complete,
        adjudicated=adjudicated,
        unanimous=unanimous,
        votes_by_person=dict(sorted(by_person.items())),
        skips_by_person={str(k): int(v) for k, v in sorted(skips.items())},
    )


def label_version(session: Session, instance_id: int, label_name: str) -> int:
    """The highest label-event id of an instance's label set (0 before any event)."""
    q = select(func.max(LabelEvent.id)).where(
        LabelEvent.instance_id == instance_id, LabelEvent.label_name == label_name
    )
    return int(session.scalar(q) or 0)


def _bump(session: Session, inst: Instance) -> None:
    # Facets and resolved-label metrics are keyed on data_version: a review event invalidates
    # them. What reads only original labels (evidence_version) stays valid.
    bench = session.get(Benchmark, inst.benchmark_id)
    assert bench is not None
    bump_data_version(session, bench, review=True)


def _lock_instance(session: Session, instance_id: int) -> Instance:
    # PostgreSQL: a row lock serialises check-then-append per instance. SQLite has no row
    # locks; callers use a BEGIN IMMEDIATE session (Store.write_factory), which serialises
    # every writer, so the check and the append see the same state there too.
    inst = session.scalar(select(Instance).where(Instance.id == instance_id).with_for_update())
    if inst is None:
        raise NotFound(f"no instance {instance_id}")
    return inst


def record(
    session: Session,
    queue: ReviewQueue,
    instance_id: int,
    principal: Principal,
    *,
    kind: str,
    value: str | None,
    seen_version: int,
    reason: str = "",
    tags: Sequence[str] = (),
) -> LabelEvent:
    """Append a vote or an adjudication if the item is still at ``seen_version``.

    Parameters
    ----------
    session : Session
        A write session (BEGIN IMMEDIATE on SQLite); the caller commits.
    queue : ReviewQueue
        The queue the item is reviewed in (its label set and choices).
    instance_id : int
        The item.
    principal : Principal
        Who writes: an assigned annotator (or any reviewer) for a vote, a reviewer for an
        adjudication.
    kind : {"vote", "adjudication"}
        What is written.
    value : str or None
        One of the queue's choices; None withdraws a vote, or adjudicates "no label".
    seen_version : int
        :func:`label_version` of the item as the writer saw it.
    reason : str
        Why (free text, shown in the history and the changelog).
    tags : sequence of str
        Defect tags, each one the queue offers (:func:`queue_tags`).

    Returns
    -------
    LabelEvent

    Raises
    ------
    StaleWrite
        The item's label changed after ``seen_version``.
    InvalidInput
        An item outside the queue, a value outside its choices, an unknown tag, a long reason.
    NotAssigned
        The user may not vote in this queue, or an annotator tried to adjudicate.

    """
    if kind not in (VOTE, ADJUDICATION):
        raise InvalidInput(f"unknown review action {kind!r}", field="kind")
    if kind == ADJUDICATION and not principal.can(Role.reviewer):
        raise NotAssigned("adjudication needs the reviewer role")
    check_may_work(session, queue, principal)
    if not in_queue(session, queue, instance_id):
        raise InvalidInput(f"instance {instance_id} is not in queue {queue.name!r}", field="item")
    bench = session.get_one(Benchmark, queue.benchmark_id)
    _check_value(bench, queue.label_name, queue.choices, value)
    return _append(
        session, instance_id, queue.label_name, principal,
        kind=kind, value=value, seen_version=seen_version, reason=reason, tags=tags,
        allowed=queue_tags(queue, bench.kind),
    )  # fmt: skip


def _check_value(
    bench: Benchmark, label_name: str, choices: Sequence[str], value: str | None
) -> None:
    """InvalidInput unless ``value`` is one of ``choices`` (or a typed answer where allowed)."""
    if value is None or value in choices:
        return
    if not takes_typed_answers(bench, label_name):
        raise InvalidInput(
            f"value {value!r} is not one of {', '.join(map(str, choices))}", field="value"
        )
    if not value.strip() or len(value) > MAX_LABEL_LENGTH:
        raise InvalidInput(
            f"a typed answer needs 1 to {MAX_LABEL_LENGTH} characters", field="value"
        )


def _append(
    session: Session,
    instance_id: int,
    label_name: str,
    principal: Principal,
    *,
    kind: str,
    value: str | None,
    seen_version: int,
    reason: str,
    tags: Sequence[str],
    allowed: Sequence[str],
) -> LabelEvent:
    """Append a review event if the item's label set is still at ``seen_version``.

    ``tags`` must be among ``allowed``; they are stored in that order.
    """
    unknown = sorted(set(tags) - set(allowed))
    if unknown:
        raise InvalidInput(f"unknown defect tag(s): {', '.join(unknown)}", field="tags")
    if len(reason) > MAX_REASON:
        raise InvalidInput(f"the reason is longer than {MAX_REASON} characters", field="reason")
    inst = _lock_instance(session, instance_id)
    current = label_version(session, instance_id, label_name)
    if current != seen_version:
        raise StaleWrite(instance_id, seen_version, current)
    event = LabelEvent(
        instance_id=instance_id,
        label_name=label_name,
        value=value,
        source=kind,
        author=principal.name,
        reason=reason.strip(),
        tags=[t for t in allowed if t in set(tags)],
    )
    session.add(event)
    _bump(session, inst)
    session.flush()
    return event


append_event = _append
"""Append a review event at ``seen_version`` (as :func:`record` does after its checks): for
review writes made outside a queue, such as a list's defect marks."""


def relabel(
    session: Session,
    instance_id: int,
    label_name: str,
    principal: Principal,
    *,
    value: str,
    seen_version: int,
    reason: str,
    tags: Sequence[str] = (),
) -> LabelEvent:
    """Fix one label without a queue: a reviewer's adjudication, appended to the history.

    The same event as a queue's adjudication (so it resolves the label and shows in the
    changelog with its author and reason), the same stale-version check.

    Raises
    ------
    NotAssigned
        ``principal`` is not a reviewer (or an admin).
    NotFound
        No such instance.
    InvalidInput
        A label set the benchmark lacks, a value outside its choices, no reason.
    StaleWrite
        The label set changed after ``seen_version``.

    """
    if not principal.can(Role.reviewer):
        raise NotAssigned("relabelling needs the reviewer role")
    inst = session.get(Instance, instance_id)
    if inst is None:
        raise NotFound(f"no instance {instance_id}")
    bench = session.get_one(Benchmark, inst.benchmark_id)
    names = label_names(session, bench.id)
    if label_name not in names:
        raise InvalidInput(
            f"no label set {label_name!r} on {bench.name!r}; choose from {', '.join(names)}",
            field="label",
        )
    if not reason.strip():
        raise InvalidInput("say why the label changes", field="reason")
    _check_value(bench, label_name, default_choices(session, bench, label_name), value)
    return _append(
        session, instance_id, label_name, principal,
        kind=ADJUDICATION, value=value, seen_version=seen_version, reason=reason, tags=tags,
        allowed=benchmark_tags(session, bench),
    )  # fmt: skip


def undo_last_vote(session: Session, queue: ReviewQueue, principal: Principal) -> int | None:
    """Withdraw ``principal``'s most recent standing vote in the queue; its instance id or None.

    The vote stays in the history; a withdrawal (null vote) is appended after it, so the item
    is offered again. Repeated undos walk further back.

    The user's row is locked first (PostgreSQL; SQLite's write transaction serialises anyway),
    so one person's simultaneous undos run one after another and each sees the withdrawals
    committed before it: every standing vote is withdrawn once, never twice.
    """
    session.execute(select(User.id).where(User.id == principal.user_id).with_for_update())
    members = select(QueueItem.instance_id).where(QueueItem.queue_id == queue.id)
    latest_per_item = (
        select(func.max(LabelEvent.id))
        .where(
            LabelEvent.instance_id.in_(members),
            LabelEvent.label_name == queue.label_name,
            LabelEvent.source == VOTE,
            LabelEvent.author == principal.name,
        )
        .group_by(LabelEvent.instance_id)
    )
    last = session.execute(
        select(LabelEvent.instance_id)
        .where(LabelEvent.id.in_(latest_per_item), LabelEvent.value.is_not(None))
        .order_by(LabelEvent.id.desc())
        .limit(1)
    ).scalar()
    if last is None:
        return None
    inst = _lock_instance(session, last)
    session.add(
        LabelEvent(
            instance_id=last,
            label_name=queue.label_name,
            value=None,
            source=VOTE,
            author=principal.name,
            reason="undo",
            tags=[],
        )
    )
    _bump(session, inst)
    session.flush()
    return int(last)


def skip(session: Session, queue: ReviewQueue, instance_id: int, principal: Principal) -> None:
    """Stop offering an item to ``principal`` (idempotent)."""
    check_may_work(session, queue, principal)
    if not in_queue(session, queue, instance_id):
        raise InvalidInput(f"instance {instance_id} is not in queue {queue.name!r}", field="item")
    # One statement: two simultaneous skips of one item cannot both pass a check and insert.
    session.execute(
        dialect_insert(session, QueueSkip)
        .values(queue_id=queue.id, instance_id=instance_id, user_id=principal.user_id)
        .on_conflict_do_nothing(index_elements=["queue_id", "instance_id", "user_id"])
    )


def standing_votes(
    session: Session, queue: ReviewQueue
) -> tuple[list[int], list[str], dict[str, dict[int, str]], dict[int, str | None]]:
    """Everything agreement needs, in queue order.

    Returns item ids, their group keys, ``{author: {item id: standing vote}}`` and the
    original value per item.
    """
    kept = queue_states(session, queue)
    ids, states = kept.ids, kept.states
    groups = dict(
        session.execute(select(Instance.id, Instance.group_key).where(Instance.id.in_(ids))).all()
    )
    votes: dict[str, dict[int, str]] = {}
    originals: dict[int, str | None] = {}
    for iid in ids:
        res = states.get(iid)
        originals[iid] = res.original if res is not None else None
        for author, value in (res.votes if res is not None else {}).items():
            votes.setdefault(author, {})[iid] = value
    return ids, [str(groups[i]) for i in ids], votes, originals


def queue_summary(queue: ReviewQueue, kind: str) -> dict[str, Any]:
    """The queue's settings as plain values (for the API); ``kind``: its benchmark's."""
    return {
        "id": queue.id,
        "name": queue.name,
        "label": queue.label_name,
        **attributes(queue, ("source", "query", "overlap_k", "blind")),
        "choices": list(queue.choices),
        "tags": queue_tags(queue, kind),
    }
