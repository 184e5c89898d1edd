"""One instance in full: payload, every label set with its history, judge outputs and scores."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from app.attributes import attributes
from app.errors import NotFound
from app.services.evidence.answer_matrix import ANSWER_LABEL
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.comments import thread
from app.services.evidence.payload_fields import SHOWN_APART, SLICE_FIELDS, TEXT_FIELDS
from app.services.evidence.resolution import fold, latest_events
from app.services.table.facets import FLIP_PREFIX, BenchmarkFacets, benchmark_facets
from app.services.table.instance_answers import ItemAnswers, item_answers
from app.services.table.instance_filter import (
    InstanceFilter,
    filter_conditions,
    plan_for_one_page,
    resolve_filter,
)
from app.services.table.instance_sort import TableSort, beyond, ordering, resolve_sort, sort_key
from app.services.table.table_order import external_ids, kept_order, neighbour_ids
from app.sql.cache import VersionedCache
from app.tables import Benchmark, Detector, Instance, Judgment, LabelEvent, Order, Score

_ORDER_RANK = {Order.AB.value: 0, Order.BA.value: 1, Order.AB_REPEAT.value: 2}


class LabelEventView(BaseModel):
    """One label event, as recorded."""

    value: str | None
    source: str
    author: str
    reason: str
    tags: list[Any]
    created_at: datetime


class LabelSetHistory(BaseModel):
    """A label set on one instance: every event, oldest first, and what they amount to.

    ``current`` is the original value (the latest event that is not a vote or an
    adjudication); ``resolved`` applies review to it with ``rule`` (see
    :mod:`app.services.evidence.resolution`, with k = :data:`REVIEW_K`).
    """

    name: str
    current: str | None
    events: list[LabelEventView]
    resolved: str | None = None
    rule: str = "original"
    votes: dict[str, str] = {}
    # The highest event id of the set: what a relabel must have seen (a stale one is a 409).
    version: int = 0


class CommentView(BaseModel):
    """One message of the instance's discussion thread."""

    author: str
    body: str
    created_at: datetime


class JudgmentView(BaseModel):
    """One judge call in one presentation order; ``choice`` is an identity, never a slot."""

    order: str
    choice: str
    confidence: float | None
    mode: str
    raw_output: str
    verdict_logits: dict[str, Any] | None
    prompt_tokens: int | None
    output_tokens: int | None
    activation_ref: str | None
    details: dict[str, Any]
    created_at: datetime


class JudgeOutputs(BaseModel):
    """A judge's calls on one instance (AB, BA, AB-repeat) and its flip label there."""

    name: str
    kind: str
    flip: str | None
    judgments: list[JudgmentView]

    def order(self, order: str) -> JudgmentView | None:
        """The judgment in presentation ``order``, if the judge was called in it."""
        return next((j for j in self.judgments if j.order == order), None)


class ScoreView(BaseModel):
    """A detector's score of one instance with its details (fold, hyperparameters...)."""

    detector: str
    kind: str
    score: float
    details: dict[str, Any]
    created_at: datetime


class Neighbours(BaseModel):
    """External ids of the instances before and after this one in the filtered table."""

    previous: str | None
    next: str | None


class InstanceDetail(BaseModel):
    """Everything recorded about one instance."""

    model_config = ConfigDict(frozen=True)

    benchmark: str
    kind: str
    external_id: str
    group_key: str
    payload: dict[str, Any]
    created_at: datetime
    labels: list[LabelSetHistory]
    judges: list[JudgeOutputs]
    scores: list[ScoreView]
    filter: InstanceFilter
    neighbours: Neighbours
    sort: str = str(TableSort())
    instance_id: int = 0
    comments: list[CommentView] = []
    answers: ItemAnswers | None = None

    def text_fields(self) -> list[tuple[str, str]]:
        """``(field, text)`` of the kind's long text fields present in the payload, in order."""
        return text_fields(self.kind, self.payload)

    def other_fields(self) -> list[tuple[str, str]]:
        """``(field, text)`` of the remaining payload fields, slice fields first."""
        return other_fields(self.kind, self.payload)


def text_fields(kind: str, payload: dict[str, Any]) -> list[tuple[str, str]]:
    """``(field, text)`` of a ``kind`` payload's long text fields present, in reading order."""
    return [
        (f, _as_text(payload[f])) for f in TEXT_FIELDS.get(kind, ()) if payload.get(f) is not None
    ]


def other_fields(kind: str, payload: dict[str, Any]) -> list[tuple[str, str]]:
    """``(field, text)`` of a payload's fields other than the long texts, slice fields first."""
    apart = {*TEXT_FIELDS.get(kind, ()), *SHOWN_APART.get(kind, ())}
    rest = sorted((f for f in payload if f not in apart), key=lambda f: (f not in SLICE_FIELDS, f))
    return [(f, _as_text(payload[f])) for f in rest]


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# Agreeing votes that override an original label on the instance page (as export's default).
REVIEW_K = 2
_BY_INSTANCE = bindparam("instance_id")
# Built once: these run on every instance page.
_INSTANCE = select(
    Instance.id, Instance.external_id, Instance.group_key, Instance.payload, Instance.created_at
).where(
    Instance.benchmark_id == bindparam("benchmark_id"),
    Instance.external_id == bindparam("external_id"),
)
_EVENT_FIELDS = ("value", "source", "author", "reason", "tags", "created_at")
_HISTORY = (
    select(LabelEvent.label_name, LabelEvent.id, *(getattr(LabelEvent, f) for f in _EVENT_FIELDS))
    .where(LabelEvent.instance_id == _BY_INSTANCE)
    .order_by(LabelEvent.id)
)
_JUDGMENT_FIELDS = tuple(JudgmentView.model_fields)
_JUDGMENTS = (
    select(Detector.name, Detector.kind, *(getattr(Judgment, f) for f in _JUDGMENT_FIELDS))
    .join(Detector, Detector.id == Judgment.detector_id)
    .where(Judgment.instance_id == _BY_INSTANCE)
)
_SCORES = (
    select(Detector.name, Detector.kind, Score.score, Score.details, Score.created_at)
    .join(Detector, Detector.id == Score.detector_id)
    .where(Score.instance_id == _BY_INSTANCE)
    .order_by(Detector.name)
)


# The detail's fields that are the instance row's own columns.
_INSTANCE_COLUMNS = ("external_id", "group_key", "payload", "created_at")


def instance_detail(
    session: Session,
    benchmark: str,
    external_id: str,
    flt: InstanceFilter | None = None,
    *,
    cache: VersionedCache | None = None,
    sort: TableSort | None = None,
) -> InstanceDetail:
    """Instance ``external_id`` of ``benchmark`` with its neighbours under ``flt`` and ``sort``.

    Parameters
    ----------
    session : Session
        An open session; nothing is written.
    benchmark : str
        Benchmark name.
    external_id : str
        The instance's id within the benchmark.
    flt : InstanceFilter, optional
        The table view the reviewer came from; previous/next follow it.
    cache : VersionedCache, optional
        Memo for the benchmark's facets.
    sort : TableSort, optional
        The table's order; previous/next follow it (default: natural order of external ids).

    Returns
    -------
    InstanceDetail

    Raises
    ------
    NotFound
        No such benchmark or instance.
    InvalidInput
        ``flt`` or ``sort`` names something the benchmark does not have.

    """
    bench = get_benchmark(session, benchmark)
    # Plain Core reads of prebuilt statements on the session's connection: the ORM layer
    # and statement building cost more than the page's handful of rows.
    conn = session.connection()
    inst = conn.execute(
        _INSTANCE, {"benchmark_id": bench.id, "external_id": external_id}
    ).one_or_none()
    if inst is None:
        raise NotFound(f"no instance {external_id!r} in benchmark {benchmark!r}")
    facets = benchmark_facets(session, bench, cache)
    flt = resolve_filter(facets, flt or InstanceFilter())
    sort = resolve_sort(facets, sort or TableSort())
    by_instance = {"instance_id": inst.id}

    histories: dict[str, list[LabelEventView]] = {}
    versions: dict[str, int] = {}
    for name, event_id, *event in conn.execute(_HISTORY, by_instance):
        histories.setdefault(name, []).append(
            LabelEventView.model_validate(dict(zip(_EVENT_FIELDS, event, strict=True)))
        )
        versions[name] = event_id  # ordered by id: the last is the highest
    rows = latest_events(session, [inst.id], list(histories))
    resolved = {name: res for (_, name), (_, res) in fold(rows, REVIEW_K).items()}
    labels = [
        LabelSetHistory(
            name=name,
            current=resolved[name].original,
            events=events,
            resolved=resolved[name].resolved,
            rule=resolved[name].rule,
            votes=resolved[name].votes,
            version=versions[name],
        )
        for name, events in sorted(histories.items())
    ]
    comments = [
        CommentView(author=c.author, body=c.body, created_at=c.created_at)
        for c in thread(session, inst.id)
    ]
    current = {s.name: s.current for s in labels}

    by_judge: dict[tuple[str, str], list[JudgmentView]] = {}
    for name, kind, *call in conn.execute(_JUDGMENTS, by_instance):
        by_judge.setdefault((name, kind), []).append(
            JudgmentView.model_validate(dict(zip(_JUDGMENT_FIELDS, call, strict=True)))
        )
    judges = [
        JudgeOutputs(
            name=name,
            kind=kind,
            flip=current.get(FLIP_PREFIX + name),
            judgments=sorted(calls, key=lambda c: _ORDER_RANK.get(c.order, 9)),
        )
        for (name, kind), calls in sorted(by_judge.items())
    ]
    scores = [
        ScoreView(detector=name, kind=kind, score=score, details=details, created_at=created_at)
        for name, kind, score, details, created_at in conn.execute(_SCORES, by_instance)
    ]
    previous, following = _neighbours(session, bench, facets, flt, sort, inst.id, cache)
    return InstanceDetail(
        benchmark=bench.name,
        kind=bench.kind,
        **attributes(inst, _INSTANCE_COLUMNS),
        labels=labels,
        judges=judges,
        scores=scores,
        filter=flt,
        neighbours=Neighbours(previous=previous, next=following),
        sort=str(sort),
        instance_id=inst.id,
        comments=comments,
        answers=item_answers(session, bench, inst.id, inst.payload, current.get(ANSWER_LABEL)),
    )


def _neighbours(
    session: Session,
    bench: Benchmark,
    facets: BenchmarkFacets,
    flt: InstanceFilter,
    sort: TableSort,
    instance_id: int,
    cache: VersionedCache | None,
) -> tuple[str | None, str | None]:
    """External ids before and after instance ``instance_id`` in the filtered, sorted table."""
    conn = session.connection()
    conds = filter_conditions(facets, flt, session.get_bind().dialect.name)
    key = sort_key(facets, sort)
    order = kept_order(session, bench, facets, flt, sort, conds, key, cache)
    if order is not None and (around := neighbour_ids(order, instance_id)) is not None:
        found_ids = [i for i in around if i is not None]
        by_id = dict(zip(found_ids, external_ids(session, found_ids), strict=True))
        return tuple(None if i is None else by_id[i] for i in around)  # type: ignore[return-value]
    value = conn.scalar(select(key).where(Instance.id == instance_id))
    if sort.is_default:
        plan_for_one_page(session)
    found = []
    for backwards in (True, False):
        found.append(
            conn.scalar(
                select(Instance.external_id)
                .where(
                    *conds,
                    beyond(
                        key,
                        value,
                        instance_id,
                        sort.descending,
                        backwards=backwards,
                        nullable=not sort.never_null,
                    ),
                )
                .order_by(*ordering(key, sort.descending, backwards=backwards))
                .limit(1)
            )
        )
    return found[0], found[1]
