"""What each person may see of review queues and their items: the blind-review rules, in one place.

In a blind queue every person, whatever their role, sees an item's text fields and nothing that
hints at its label: no original or resolved value, no other person's vote, no adjudication, no
payload metadata (it can hold a reference label), no detector output and no other person's note. A
reviewer who must decide an item reveals it explicitly; the reveal is logged as a note on the item
(:func:`app.services.review.review_actions.reveal_item`) and from then on that reviewer sees it all,
as everyone does in an open queue. The queue's own page (progress, agreement, item states) stays a
reviewer's overview. The review pages and the REST API read queues and items through these functions
only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import AppellateError, InvalidInput
from app.services.accounts.users import Principal
from app.services.evidence.answer_matrix import ANSWER_KINDS, ANSWER_LABEL
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.choices import option_letters
from app.services.evidence.comments import thread
from app.services.evidence.detectors import RANKER_KIND, RANKER_PREFIX
from app.services.evidence.labels import default_label_set, label_names
from app.services.evidence.resolution import Resolution, fold, latest_events
from app.services.jobs.metrics_view import Way, way_of
from app.services.metrics.answer_changes import AnswerComparison, answer_comparison
from app.services.metrics.metric_results import labelled_count
from app.services.metrics.metrics_compare import MetricsComparison, compare_metrics
from app.services.metrics.metrics_query import MetricsQuery
from app.services.metrics.rankers import RANKERS
from app.services.review import queues
from app.services.review.queue_agreement import queue_agreement
from app.services.review.queue_sources import (
    DEFAULT_SIZE,
    SOURCES,
    QueueSource,
    check_source,
    source_items,
)
from app.services.review.queue_states import queue_states
from app.services.table.facets import benchmark_facets, version_key
from app.services.table.instance_answers import ItemAnswers, item_answers
from app.services.table.instances import other_fields, text_fields
from app.sql.cache import VersionedCache
from app.tables import (
    Benchmark,
    BenchmarkKind,
    Comment,
    Detector,
    Instance,
    ReviewQueue,
    Role,
    Score,
)

# Bootstrap resamples of the queue page's intervals: enough for two decimals, quick to draw.
REVIEW_RESAMPLES = 500
# Item rows per page of a reviewer's queue page: a queue of 2,000 items rendered whole took
# a third of the page's time.
ITEMS_PER_PAGE = 100


def sees_labels(queue: ReviewQueue, principal: Principal, revealed: bool = False) -> bool:
    """Whether labels, votes and detector outputs of an item may reach ``principal``.

    Always in an open queue; in a blind queue only for a reviewer who ``revealed`` the item.
    """
    return not queue.blind or (revealed and principal.can(Role.reviewer))


def reveal_note(queue: ReviewQueue) -> str:
    """The note that logs a reviewer's reveal of an item of blind ``queue`` (and marks it)."""
    return f"Revealed labels and votes in blind queue #{queue.id} ({queue.name})."


def has_revealed(queue: ReviewQueue, principal: Principal, comments: list[Comment]) -> bool:
    """Whether ``principal`` logged a reveal of the item whose thread is ``comments``."""
    note = reveal_note(queue)
    return any(c.author == principal.name and c.body == note for c in comments)


# ----------------------------------------------------------------------------- queues


@dataclass(frozen=True)
class QueueRow:
    """A queue on the list of queues: its benchmark, size, progress and the viewer's votes."""

    queue: ReviewQueue
    benchmark: str
    n: int
    progress: queues.Progress
    mine: int


def visible_queues(session: Session, principal: Principal) -> list[QueueRow]:
    """The queues ``principal`` may work in, newest first."""
    rows = []
    for queue, bench_name, n_items in queues.list_queues(session):
        if not queues.may_work(session, queue, principal):
            continue
        prog = queues.progress(session, queue)
        mine = prog.votes_by_person.get(principal.name, 0)
        rows.append(QueueRow(queue, bench_name, n_items, prog, mine))
    return rows


@dataclass(frozen=True)
class QueueItemRow:
    """One item on a reviewer's queue page, with its resolution (None before any event)."""

    id: int
    external_id: str
    res: Resolution | None


@dataclass(frozen=True)
class QueuePage:
    """A queue's page; the item states and agreement are for reviewers only.

    Everything here is proportional to the queue. The metrics comparison reads the whole
    benchmark, so the page loads it apart (:func:`queue_comparison`).
    """

    queue: ReviewQueue
    bench: Benchmark
    progress: queues.Progress
    assignees: list[str]
    items: list[QueueItemRow]
    # Whether any item is left for this user to vote on (False: the queue is done for them).
    has_next: bool = True
    # The page of ``items`` (ITEMS_PER_PAGE rows each) and how many there are.
    page: int = 1
    pages: int = 1


def queue_page(session: Session, queue_id: int, principal: Principal, page: int = 1) -> QueuePage:
    """Settings, progress per person and, for reviewers, the items' states a page at a time.

    The agreement is a section of its own (:func:`queue_agreement_section`), loaded on request.

    Raises
    ------
    NotFound
        No such queue.
    NotAssigned
        ``principal`` may not work in it.

    """
    queue = queues.get_queue_for(session, queue_id, principal)
    bench = session.get(Benchmark, queue.benchmark_id)
    assert bench is not None
    kept = queue_states(session, queue)
    progress = queues.progress(session, queue, kept)
    people = queues.assignees(session, queue)
    has_next = queues.next_item(session, queue, principal, kept) is not None
    if not principal.can(Role.reviewer):
        return QueuePage(queue, bench, progress, people, items=[], has_next=has_next)
    pages = max(1, math.ceil(len(kept.ids) / ITEMS_PER_PAGE))
    page = min(page, pages)
    shown = kept.ids[(page - 1) * ITEMS_PER_PAGE : page * ITEMS_PER_PAGE]
    items = _item_rows(session, shown, kept.states)
    return QueuePage(queue, bench, progress, people, items, has_next, page, pages)


@dataclass(frozen=True)
class QueueAgreement:
    """A queue's agreement section: ``agreement`` as :func:`queue_agreement` returns it."""

    queue: ReviewQueue
    bench: Benchmark
    agreement: dict[str, Any]


def queue_agreement_section(
    session: Session, queue_id: int, principal: Principal
) -> QueueAgreement:
    """The agreement of a queue's standing votes: a section loaded on request.

    Not computed with the queue page: with 20 reviewers voting, each vote changes the figures,
    and the page recomputed every annotator pair's bootstrap on nearly every view (queue page
    p95 18 s in a 20-reviewer soak at a million items).

    Raises
    ------
    NotFound
        No such queue.
    NotAssigned
        ``principal`` may not work in it.

    """
    queue = queues.get_queue_for(session, queue_id, principal)
    bench = session.get_one(Benchmark, queue.benchmark_id)
    # Kept by queue_agreement until a vote changes it.
    return QueueAgreement(queue, bench, queue_agreement(session, queue, resamples=REVIEW_RESAMPLES))


@dataclass(frozen=True)
class QueueComparison:
    """A queue's "before you accept" section: metrics on the original vs the resolved labels.

    ``comparison`` is None when there is none: ``note`` says why (a label set that is not
    binary, or one no detector scores), or ``deferred`` is set: the benchmark has ``labelled``
    items, more than the ``limit`` a request computes, and the metrics page computes both
    sides as jobs instead.
    """

    queue: ReviewQueue
    bench: Benchmark
    comparison: MetricsComparison | None = None
    comparison_note: str = ""
    deferred: bool = False
    # A choice or answer benchmark: the models' answer metrics instead of detector metrics.
    answers: AnswerComparison | None = None
    labelled: int = 0
    limit: int = 0


# Comparisons by benchmark version: every vote bumps data_version, so a cached one is current.
# Sixteen covers the queues reviewers keep open; each holds a few metric rows per detector.
COMPARISON_CACHE = VersionedCache(maxsize=16)


def queue_comparison(
    session: Session,
    queue_id: int,
    principal: Principal,
    *,
    limit: int,
    facets_cache: VersionedCache | None = None,
) -> QueueComparison:
    """The metrics comparison of a queue's label set, when the benchmark is small enough.

    A benchmark with at most ``limit`` labelled items (the metrics page's inline limit, see
    :func:`app.services.jobs.metrics_view.way_of`) is compared here, once per data
    version; a bigger one is not computed in the request (``deferred``).

    Raises
    ------
    NotFound
        No such queue.
    NotAssigned
        ``principal`` may not work in it.

    """
    queue = queues.get_queue_for(session, queue_id, principal)
    bench = session.get(Benchmark, queue.benchmark_id)
    assert bench is not None
    facets = benchmark_facets(session, bench, facets_cache)
    query = MetricsQuery(bench.name, queue.label_name, k=queue.overlap_k)
    labelled = labelled_count(facets, queue.label_name)
    # The metrics view's decision; a comparison is not stored, and not left to a job either.
    if way_of(facets, query, limit, stored=False) is Way.JOB:
        return QueueComparison(queue, bench, deferred=True, labelled=labelled, limit=limit)
    key = ("queue-comparison", *version_key(bench), queue.label_name, queue.overlap_k)
    comparison, note = COMPARISON_CACHE.get_or_compute(
        key, lambda: _before_accepting(session, bench, queue)
    )
    if isinstance(comparison, AnswerComparison):
        return QueueComparison(queue, bench, answers=comparison, labelled=labelled, limit=limit)
    return QueueComparison(queue, bench, comparison, note, labelled=labelled, limit=limit)


def _before_accepting(
    session: Session, bench: Benchmark, queue: ReviewQueue
) -> tuple[MetricsComparison | AnswerComparison | None, str]:
    """Metrics on the original vs the resolved labels, or why there are none.

    On a choice or answer benchmark reviewing its reference: the models' accuracy and
    macro-F1 on both sides, and the rankers on the defect labels.
    """
    if bench.kind in ANSWER_KINDS and queue.label_name == ANSWER_LABEL:
        answers = answer_comparison(
            session, bench, queue.label_name, k=queue.overlap_k, resamples=REVIEW_RESAMPLES
        )
        return answers, ""
    try:
        comparison = compare_metrics(
            session, bench.name, queue.label_name, k=queue.overlap_k, resamples=REVIEW_RESAMPLES
        )
    except AppellateError as exc:
        # A label set that is not binary, or one no detector scores: say so.
        return None, exc.message
    return comparison, ""


def _item_rows(
    session: Session, ids: list[int], states: Mapping[int, Resolution]
) -> list[QueueItemRow]:
    ext = dict(
        session.execute(select(Instance.id, Instance.external_id).where(Instance.id.in_(ids))).all()
    )
    return [QueueItemRow(iid, ext[iid], states.get(iid)) for iid in ids]


# ----------------------------------------------------------------------------- items


@dataclass(frozen=True)
class RankerScore:
    """A label-error ranker's score of one item (higher: its label is more likely wrong)."""

    detector: str
    title: str
    score: float


@dataclass(frozen=True)
class ItemEvidence:
    """What an adjudicator weighs on a choice or answer item besides its text.

    ``answers``: each model's answer (per option on a choice item, which models chose it);
    ``rankers``: the scores of the benchmark's label-error rankers for this item.
    """

    answers: ItemAnswers
    rankers: list[RankerScore]


def item_evidence(
    session: Session, bench: Benchmark, inst: Instance, reference: str | None
) -> ItemEvidence | None:
    """The models' answers and the rankers' scores of ``inst`` (None unless choice or answer).

    ``reference`` is the item's original ``reference`` label, the one the models' answers are
    graded against and the rankers suspect.
    """
    answers = item_answers(session, bench, inst.id, inst.payload, reference)
    if answers is None:
        return None
    rows = session.execute(
        select(Detector.name, Score.score)
        .join(Detector, Detector.id == Score.detector_id)
        .where(Score.instance_id == inst.id, Detector.kind == RANKER_KIND)
        .order_by(Detector.name)
    ).all()
    rankers = []
    for name, score in rows:
        ranker = RANKERS.get(str(name).removeprefix(RANKER_PREFIX))
        rankers.append(RankerScore(name, ranker.title if ranker else "", float(score)))
    return ItemEvidence(answers, rankers)


@dataclass(frozen=True)
class ItemView:
    """What the item page shows; ``resolution`` and ``fields`` are None/empty in blind mode."""

    instance_id: int
    external_id: str
    kind: str
    texts: list[tuple[str, str]]
    fields: list[tuple[str, str]]
    version: int
    own_vote: str | None
    n_votes: int
    resolution: Resolution | None
    comments: list[Comment]
    # A choice item's options (part of the question: shown in blind mode too), lettered.
    options: list[tuple[str, str]] = field(default_factory=list)
    # Whether a vote may type a value (a corrected reference answer) besides the choices.
    typed: bool = False
    # Whether the labels, votes and others' notes are shown (see sees_labels).
    labels_shown: bool = False
    # A reviewer in a blind queue who has not revealed the item may (a logged click).
    can_reveal: bool = False
    # A choice or answer item's models' answers and rankers' scores, where labels are shown.
    evidence: ItemEvidence | None = None


def item_view(
    session: Session, queue: ReviewQueue, instance_id: int, principal: Principal
) -> ItemView:
    """The item as ``principal`` may see it (see :func:`sees_labels`).

    Raises
    ------
    InvalidInput
        The instance is not in the queue.

    """
    if not queues.in_queue(session, queue, instance_id):
        raise InvalidInput(f"instance {instance_id} is not in queue {queue.name!r}", field="item")
    inst = session.get(Instance, instance_id)
    assert inst is not None
    bench = session.get(Benchmark, inst.benchmark_id)
    assert bench is not None
    res = queues.resolutions(session, queue, [instance_id]).get(instance_id)
    comments = thread(session, instance_id)
    sees = sees_labels(queue, principal, has_revealed(queue, principal, comments))
    if not sees:
        # Another annotator's note may name a label; blind annotators read their own only.
        comments = [c for c in comments if c.author == principal.name]
    return ItemView(
        instance_id=instance_id,
        external_id=inst.external_id,
        kind=bench.kind,
        texts=text_fields(bench.kind, inst.payload),
        # Payload metadata can hold a reference label (e.g. JudgeBench's "label"): blind
        # views show the text fields only.
        fields=other_fields(bench.kind, inst.payload) if sees else [],
        version=queues.label_version(session, instance_id, queue.label_name),
        own_vote=res.votes.get(principal.name) if res is not None else None,
        n_votes=len(res.votes) if res is not None else 0,
        resolution=res if sees else None,
        comments=comments,
        options=_options(bench.kind, inst.payload),
        typed=queues.takes_typed_answers(bench, queue.label_name),
        labels_shown=sees,
        can_reveal=not sees and principal.can(Role.reviewer),
        # Model answers and ranker scores are detector outputs: hidden where labels are.
        evidence=item_evidence(session, bench, inst, _reference(session, queue, instance_id, res))
        if sees
        else None,
    )


def _reference(
    session: Session, queue: ReviewQueue, instance_id: int, res: Resolution | None
) -> str | None:
    """The item's original ``reference`` value (the queue's own resolution when it votes on it)."""
    if queue.label_name == ANSWER_LABEL:
        return res.original if res is not None else None
    rows = latest_events(session, [instance_id], [ANSWER_LABEL])
    folded = fold(rows, queue.overlap_k).get((instance_id, ANSWER_LABEL))
    return folded[1].original if folded is not None else None


def _options(kind: str, payload: dict[str, Any]) -> list[tuple[str, str]]:
    if kind != BenchmarkKind.choice:
        return []
    texts = [str(o) for o in payload.get("options") or []]
    return list(zip(option_letters(len(texts)), texts, strict=True))


@dataclass(frozen=True)
class ItemPage:
    """An item's page: the queue, the item as the viewer may see it, and the queue's progress."""

    queue: ReviewQueue
    item: ItemView
    progress: queues.Progress
    # The defect tags the queue offers.
    tags: list[str]


def item_page(session: Session, queue_id: int, instance_id: int, principal: Principal) -> ItemPage:
    """The item page of ``instance_id`` in queue ``queue_id`` for ``principal``.

    Raises
    ------
    NotFound
        No such queue.
    NotAssigned
        ``principal`` may not work in it.
    InvalidInput
        The instance is not in the queue.

    """
    queue = queues.get_queue_for(session, queue_id, principal)
    view = item_view(session, queue, instance_id, principal)
    tags = queues.queue_tags(queue, view.kind)
    return ItemPage(queue, view, queues.progress(session, queue), tags)


# ----------------------------------------------------------------------------- REST bodies


class ItemState(BaseModel):
    """An item's version and the caller's vote; the label fields are unset in blind mode.

    Serialised with unset fields left out, so a blind annotator's body has no label keys.
    """

    instance_id: int
    version: int
    own_vote: str | None
    n_votes: int
    original: str | None = None
    resolved: str | None = None
    rule: str | None = None
    votes: dict[str, str] | None = None
    adjudication: str | None = None


def item_state(
    session: Session, queue: ReviewQueue, instance_id: int, principal: Principal
) -> ItemState:
    """:func:`item_view` as the REST API's body."""
    view = item_view(session, queue, instance_id, principal)
    seen = {"version": view.version, "own_vote": view.own_vote, "n_votes": view.n_votes}
    res = view.resolution
    if res is None:
        return ItemState(instance_id=instance_id, **seen)
    return ItemState(
        instance_id=instance_id,
        **seen,
        original=res.original,
        resolved=res.resolved,
        rule=res.rule,
        votes=res.votes,
        adjudication=res.adjudication.value if res.adjudication else None,
    )


class QueueProgress(BaseModel):
    """Items done and votes per person; how items were decided is unset in blind mode."""

    total: int
    complete: int
    adjudicated: int | None = None
    unanimous: int | None = None
    votes_by_person: dict[str, int]
    skips_by_person: dict[str, int]


class QueueSummary(BaseModel):
    """A queue's settings and progress, as the REST API returns them."""

    id: int
    name: str
    label: str
    source: str
    query: str
    overlap_k: int
    blind: bool
    choices: list[str]
    # The defect tags votes and adjudications may carry.
    tags: list[str]
    progress: QueueProgress


def queue_summary(session: Session, queue: ReviewQueue, principal: Principal) -> QueueSummary:
    """The queue's settings and progress as ``principal`` may see them."""
    progress = asdict(queues.progress(session, queue))
    if queue.blind and not principal.can(Role.reviewer):
        # How items were decided says something about their labels; blind annotators see
        # only how many are done.
        for key in ("adjudicated", "unanimous"):
            del progress[key]
    kind = session.get_one(Benchmark, queue.benchmark_id).kind
    return QueueSummary(**queues.queue_summary(queue, kind), progress=QueueProgress(**progress))


# ----------------------------------------------------------------------------- new queues


@dataclass(frozen=True)
class QueuePreview:
    """How many items a source lists and how many a queue of ``size`` takes of them.

    ``error`` says why the source cannot be read (an unparsable query, an unknown label set);
    ``matching`` is then None.
    """

    size: int
    matching: int | None = None
    error: str = ""

    @property
    def taken(self) -> int:
        """Items the queue would take: the first ``size`` of the ``matching`` ones."""
        return min(self.matching or 0, self.size)


def queue_preview(
    session: Session, bench: Benchmark, source: str, query: str, size: int
) -> QueuePreview:
    """What a queue of ``size`` built from ``source`` and ``query`` would take.

    Errors of the query or the size are the preview's (``error``), not raised: the form
    shows them beside the fields while they are being typed.
    """
    try:
        found = source_items(session, bench, source, query, size)
    except InvalidInput as exc:
        return QueuePreview(size, error=exc.message)
    return QueuePreview(size, found.matching)


@dataclass(frozen=True)
class QueueForm:
    """What the new-queue form offers: label sets, default tags and how many items match."""

    bench: Benchmark
    source: str
    labels: list[str]
    label: str
    # The benchmark kind's default defect tags (the form's tag list starts with them).
    tags: list[str]
    preview: QueuePreview
    # Every kind of source, in the form's order (the registry's).
    sources: list[QueueSource] = field(default_factory=lambda: list(SOURCES.values()))


def queue_benchmarks(session: Session) -> list[str]:
    """The benchmarks a new queue may be built on, by name."""
    return list(session.scalars(select(Benchmark.name).order_by(Benchmark.name)))


def queue_form(
    session: Session,
    benchmark: str,
    source: str,
    label: str = "",
    query: str = "",
    size: int = DEFAULT_SIZE,
) -> QueueForm:
    """The choices of a new queue on ``benchmark`` built from ``source`` and ``query``.

    ``label`` is preselected when given, else ``reference`` if the benchmark has it, else its
    first label set.

    Raises
    ------
    NotFound
        No such benchmark.
    InvalidInput
        An unknown source.

    """
    bench = get_benchmark(session, benchmark)
    labels = label_names(session, bench.id)
    check_source(source)
    return QueueForm(
        bench=bench,
        source=source,
        labels=labels,
        label=default_label_set(labels, label),
        tags=queues.default_tags(bench.kind),
        preview=queue_preview(session, bench, source, query, size),
    )
