"""Queue sources from judges: pairs whose orders disagree, pairs the judge and people split on.

Each takes a query string of its own: ``judge=NAME`` (optional when the benchmark has one judge),
and for the people's source also ``label=NAME`` (default: the pair-verdict label set with the most
votes) and ``k=N`` (agreeing voters that resolve a label, default 2, as resolution's default).
Items come in external-id order.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.judge_verdicts import judge_verdicts
from app.services.evidence.resolution import check_k, resolved_values
from app.services.review.judge_people import default_people_label
from app.services.review.source_items import QueueSource, SourceItems, filtered_items
from app.services.table.filter_query import parse_query
from app.services.table.instance_filter import FlipState, InstanceFilter
from app.sql.bulk import one_of
from app.tables import Benchmark, Detector, Instance, Judgment

__all__ = ["JUDGE_SOURCES", "JudgeQuery", "parse_judge_query"]

DEFAULT_K = 2


@dataclass(frozen=True)
class JudgeQuery:
    """A judge source's query: the judge, and the people's label set and quorum."""

    judge: str
    label: str | None = None
    k: int = DEFAULT_K


def _judges(session: Session, bench: Benchmark) -> list[str]:
    """Names of the detectors with judgments on ``bench``, sorted."""
    q = (
        select(Detector.name)
        .join(Judgment, Judgment.detector_id == Detector.id)
        .join(Instance, Instance.id == Judgment.instance_id)
        .where(Instance.benchmark_id == bench.id)
        .distinct()
        .order_by(Detector.name)
    )
    return list(session.scalars(q))


def parse_judge_query(
    session: Session, bench: Benchmark, query: str, *, people: bool
) -> JudgeQuery:
    """The judge (and for ``people``, the label set and k) a judge source's query names.

    Raises
    ------
    InvalidInput
        An unknown parameter, a judge that did not judge here (or none named where several
        did), a k that is not a whole number >= 1.

    """
    allowed = ("judge", "label", "k") if people else ("judge",)
    params = parse_query(query, keep_blank=False)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise InvalidInput(
            f"unknown parameter(s) {', '.join(unknown)}; this source takes {', '.join(allowed)}",
            field="query",
        )
    judges = _judges(session, bench)
    judge = params.get("judge", [""])[-1].strip()
    if not judge:
        if len(judges) != 1:
            named = ", ".join(judges) if judges else "none has judged here"
            raise InvalidInput(f"name the judge: judge=NAME ({named})", field="query")
        judge = judges[0]
    elif judge not in judges:
        raise InvalidInput(
            f"no judge {judge!r} judged {bench.name}; judges: {', '.join(judges) or 'none'}",
            field="query",
        )
    if not people:
        return JudgeQuery(judge)
    raw_k = params.get("k", [str(DEFAULT_K)])[-1]
    try:
        k = check_k(int(raw_k))
    except (ValueError, InvalidInput):
        raise InvalidInput(f"k must be a whole number >= 1, got {raw_k!r}", field="query") from None
    label = default_people_label(session, bench, params.get("label", [""])[-1].strip() or None)
    return JudgeQuery(judge, label, k)


def _flips(session: Session, bench: Benchmark, query: str, size: int) -> SourceItems:
    """Pairs whose two presentation orders the judge decided differently (its flips)."""
    judge = parse_judge_query(session, bench, query, people=False).judge
    return filtered_items(session, bench, InstanceFilter(judge=judge, flip=FlipState.yes), size)


def _against_people(session: Session, bench: Benchmark, query: str, size: int) -> SourceItems:
    """Pairs where the judge's folded verdict differs from the people's resolved label."""
    parsed = parse_judge_query(session, bench, query, people=True)
    if parsed.label is None:
        raise InvalidInput(
            f"{bench.name} has no label set of pair verdicts (A, B, tie) to compare with",
            field="query",
        )
    people = resolved_values(session, bench.id, parsed.label, k=parsed.k)
    verdicts = judge_verdicts(session, bench.id, people.keys()).get(parsed.judge, {})
    split = [iid for iid, verdict in verdicts.items() if verdict != people[iid]]
    if not split:
        return SourceItems(0, [])
    q = (
        select(Instance.id)
        .where(one_of(session, Instance.id, split))
        .order_by(Instance.external_id)
    )
    ordered = list(session.scalars(q))
    return SourceItems(len(ordered), ordered[:size])


JUDGE_SOURCES: tuple[QueueSource, ...] = (
    QueueSource(
        "judge-flips",
        "the judge's two orders disagree (judge=NAME)",
        "judge=fastchat_pair/gpt-4",
        _flips,
    ),
    QueueSource(
        "judge-people",
        "the judge disagrees with the people (judge=NAME&label=SET&k=N)",
        "judge=fastchat_pair/gpt-4&label=human&k=1",
        _against_people,
    ),
)
"""The judges' queue sources, registered in :data:`app.services.review.queue_sources.SOURCES`."""
