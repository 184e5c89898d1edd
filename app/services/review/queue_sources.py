"""Where a review queue's items come from: an instance-table filter or a disagreement list.

Both are given as the query string of the dashboard page that shows them, so "review these"
on a page builds a queue of exactly the rows that page lists (disagreements in rank order,
filtered instances in external-id order).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.disagreements.disagreement_query import parse_disagreement_query
from app.services.disagreements.lists import find_disagreements
from app.services.evidence.labels import benchmark_label
from app.services.table.facets import benchmark_facets
from app.services.table.filter_query import parse_filter_query, parse_query
from app.services.table.instance_filter import filter_conditions, resolve_filter
from app.tables import Benchmark, Instance

SOURCES = ("filter", "disagreements")
DEFAULT_LIMIT = 200


def check_source(source: str) -> str:
    """``source`` if it names a known kind of queue source, else InvalidInput."""
    if source not in SOURCES:
        raise InvalidInput(f"source must be one of {', '.join(SOURCES)}", field="source")
    return source


def member_ids(session: Session, bench: Benchmark, source: str, query: str) -> list[int]:
    """The instance ids a queue built from ``source`` and ``query`` holds, in queue order."""
    if check_source(source) == "filter":
        return filtered_ids(session, bench, query)
    return disagreement_ids(session, bench, query)[0]


def filtered_ids(session: Session, bench: Benchmark, query: str) -> list[int]:
    """Instance ids the benchmark table lists for ``query``, in external-id order."""
    try:
        flt = parse_filter_query(query)
    except InvalidInput as exc:
        raise InvalidInput(f"filter: {exc.message}", field="query") from None
    facets = benchmark_facets(session, bench)
    dialect = session.get_bind().dialect.name
    conds = filter_conditions(facets, resolve_filter(facets, flt), dialect, counting=True)
    q = select(Instance.id).where(*conds).order_by(Instance.external_id)
    return list(session.scalars(q))


def disagreement_ids(session: Session, bench: Benchmark, query: str) -> tuple[list[int], str]:
    """Instance ids of a disagreement list (rank order) and its label set.

    ``query`` is the disagreements page's query string, parsed as the page parses it (stale
    parameters of other modes are dropped); at most :data:`DEFAULT_LIMIT` items unless it
    sets a limit.
    """
    try:
        parsed = parse_disagreement_query(parse_query(query, keep_blank=False))
        label = benchmark_label(session, bench.id, parsed.label)
        limited = parsed.with_label(label).with_limit(parsed.limit or DEFAULT_LIMIT)
        found = find_disagreements(session, bench.name, limited)
    except InvalidInput as exc:
        raise InvalidInput(f"disagreements: {exc.message}", field="query") from None
    return [item.instance_id for item in found.items], label
