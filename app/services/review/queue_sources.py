"""Where a review queue's items come from: the registry of sources, and the page-backed ones.

An instance-table filter and a disagreement list are given as the query string of the dashboard
page that shows them, so "review these" on a page builds a queue of the rows that page lists
(disagreements in rank order, filtered instances in external-id order): the first of them, as
many as the queue's size says. The judges' sources (:mod:`app.services.review.judge_sources`)
take a query of their own. The new-queue form shows how many items the source lists beside the
size (issue 21 item 3).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.disagreements.disagreement_query import parse_disagreement_query
from app.services.disagreements.lists import find_disagreements
from app.services.evidence.labels import benchmark_label
from app.services.review.judge_sources import JUDGE_SOURCES
from app.services.review.source_items import QueueSource, SourceItems, filtered_items
from app.services.table.filter_query import parse_filter_query, parse_query
from app.tables import Benchmark

__all__ = [
    "DEFAULT_SIZE",
    "MAX_SIZE",
    "SOURCES",
    "QueueSource",
    "SourceItems",
    "check_size",
    "check_source",
    "disagreement_ids",
    "member_ids",
    "source_items",
]

DEFAULT_SIZE = 200
"""Items a new queue takes when its form does not say (the form's size field starts here)."""
MAX_SIZE = 10_000
"""The most items one queue takes: a reviewer's queue page lists every item of it, and each
request folds every item's votes (progress), so a bigger queue makes every page of it slow."""


def check_source(source: str) -> str:
    """``source`` if it names a known kind of queue source, else InvalidInput."""
    if source not in SOURCES:
        raise InvalidInput(f"source must be one of {', '.join(SOURCES)}", field="source")
    return source


def check_size(size: int) -> int:
    """``size`` if a queue may take that many items (1 to :data:`MAX_SIZE`), else InvalidInput."""
    if isinstance(size, bool) or not 1 <= size <= MAX_SIZE:
        raise InvalidInput(f"a queue takes 1 to {MAX_SIZE:,} items, not {size}", field="size")
    return size


def source_items(
    session: Session, bench: Benchmark, source: str, query: str, size: int = DEFAULT_SIZE
) -> SourceItems:
    """How many items ``source`` and ``query`` list, and the first ``size`` of them in order.

    Raises
    ------
    InvalidInput
        An unknown source, an unparsable query, or a size out of range.

    """
    check_size(size)
    return SOURCES[check_source(source)].items(session, bench, query, size)


def member_ids(
    session: Session, bench: Benchmark, source: str, query: str, size: int = DEFAULT_SIZE
) -> list[int]:
    """The instance ids a queue of ``size`` built from ``source`` and ``query`` holds, in order."""
    return source_items(session, bench, source, query, size).ids


def _filtered(session: Session, bench: Benchmark, query: str, size: int) -> SourceItems:
    """Instances the benchmark table lists for ``query``: how many, the first ``size`` ids.

    In external-id order, as the table lists them by default.
    """
    try:
        flt = parse_filter_query(query)
    except InvalidInput as exc:
        raise InvalidInput(f"filter: {exc.message}", field="query") from None
    return filtered_items(session, bench, flt, size)


def disagreement_ids(
    session: Session, bench: Benchmark, query: str, size: int = DEFAULT_SIZE
) -> tuple[list[int], str]:
    """The first ``size`` instance ids of a disagreement list (rank order), and its label set."""
    found, label = _disagreements(session, bench, query, size)
    return found.ids, label


def _disagreements(
    session: Session, bench: Benchmark, query: str, size: int
) -> tuple[SourceItems, str]:
    """A disagreement list's length and first ``size`` ids (rank order), and its label set.

    ``query`` is the disagreements page's query string, parsed as the page parses it (stale
    parameters of other modes are dropped). A ``limit`` in it caps the list as it caps the
    page: the list then has at most that many items.
    """
    try:
        parsed = parse_disagreement_query(parse_query(query, keep_blank=False))
        label = benchmark_label(session, bench.id, parsed.label)
        cap = parsed.limit
        taken = size if cap is None else min(cap, size)
        found = find_disagreements(session, bench.name, parsed.with_label(label).with_limit(taken))
    except InvalidInput as exc:
        raise InvalidInput(f"disagreements: {exc.message}", field="query") from None
    matching = found.total if cap is None else min(cap, found.total)
    return SourceItems(matching, [item.instance_id for item in found.items]), label


def _disagreement_items(session: Session, bench: Benchmark, query: str, size: int) -> SourceItems:
    return _disagreements(session, bench, query, size)[0]


SOURCES: dict[str, QueueSource] = {
    s.name: s
    for s in (
        QueueSource(
            "disagreements",
            "a disagreement list (query of the disagreements page)",
            "detector=...&min_confidence=0.9",
            _disagreement_items,
        ),
        QueueSource(
            "filter",
            "an instance filter (query of the benchmark table)",
            "label=reference:A&slice=...",
            _filtered,
        ),
        *JUDGE_SOURCES,
    )
}
"""Every kind of queue source by name, in the new-queue form's order."""
