"""What a review queue's source is: a named way to list a benchmark's items from a query string.

The kinds themselves live beside what they read (:mod:`app.services.review.queue_sources` for
table filters and disagreement lists, :mod:`app.services.review.judge_sources` for judges) and
are registered in :data:`app.services.review.queue_sources.SOURCES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.services.table.facets import benchmark_facets
from app.services.table.instance_filter import InstanceFilter, filter_conditions, resolve_filter
from app.tables import Benchmark, Instance


@dataclass(frozen=True)
class SourceItems:
    """What a source lists: ``matching`` items, of which a queue of that size takes ``ids``."""

    matching: int
    ids: list[int]


Lister = Callable[[Session, Benchmark, str, int], SourceItems]
"""``(session, benchmark, query, size)`` -> how many items the source lists, the first ``size``."""


@dataclass(frozen=True)
class QueueSource:
    """One kind of queue source: its name (the form's value), what it lists, how to ask.

    ``title`` is the new-queue form's option text; ``hint`` the query field's example.
    """

    name: str
    title: str
    hint: str
    items: Lister


def filtered_items(
    session: Session, bench: Benchmark, flt: InstanceFilter, size: int
) -> SourceItems:
    """Instances the benchmark table lists for ``flt``: how many, the first ``size`` ids.

    In external-id order, as the table lists them by default.
    """
    facets = benchmark_facets(session, bench)
    dialect = session.get_bind().dialect.name
    conds = filter_conditions(facets, resolve_filter(facets, flt), dialect, counting=True)
    matching = session.scalar(select(func.count()).select_from(Instance).where(*conds))
    q = select(Instance.id).where(*conds).order_by(Instance.external_id).limit(size)
    return SourceItems(int(matching or 0), list(session.scalars(q)))
