"""The instance table's rows in a sorted order, kept whole for big benchmarks.

A table sorted by a score, a label or a confidence orders rows by a correlated value no index
holds, so the database evaluates and sorts it for every row of the benchmark on every page
request (3.5 s at a million instances on PostgreSQL), whether the page is the first or the
last. For benchmarks of at least :data:`KEEP_ORDER_FROM` instances the whole order is read once
per evidence version, filter and sort, as an array of instance ids (8 bytes a row: 8 MB at a
million), kept in :data:`ORDER_CACHE`, and a page or an instance's neighbours are then slices of
it: work in proportion to the page. The orders a header click opens (each scored detector's
score, highest first, unfiltered) are also kept in the store by the benchmark's warm-up job
(:func:`read_order`, ``app.sql.kept_arrays``): the first sorted page after a restart loads them
instead of sorting.

The order reads only evidence and original labels, like every table read, so review events
(votes, adjudications) leave it valid; the key holds the benchmark's ``evidence_version``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from app.services.evidence.labelled_items import data_key
from app.services.table.facets import BenchmarkFacets
from app.services.table.instance_filter import InstanceFilter, filter_conditions, resolve_filter
from app.services.table.instance_sort import TableSort, ordering, resolve_sort, sort_key
from app.sql.cache import VersionedCache
from app.sql.kept_arrays import kept_arrays, kept_name
from app.tables import Benchmark, Instance

__all__ = [
    "KEEP_ORDER_FROM",
    "ORDER_CACHE",
    "external_ids",
    "kept_order",
    "neighbour_ids",
    "order_name",
    "read_order",
    "resolved_order_name",
]

KEEP_ORDER_FROM = 20_000
"""Benchmarks with at least this many instances keep sorted orders whole; smaller ones let the
database sort each page (a few milliseconds)."""

ORDER_CACHE = VersionedCache(maxsize=8)
"""Process-wide memo of kept orders (keyed by store, benchmark and evidence version): small,
as one order of a million rows is 8 MB."""


def kept_order(
    session: Session,
    bench: Benchmark,
    facets: BenchmarkFacets,
    flt: InstanceFilter,
    sort: TableSort,
    conds: Sequence[ColumnElement[bool]],
    key: ColumnElement[object],
    cache: VersionedCache | None,
) -> NDArray[np.int64] | None:
    """The ids of the filtered rows in ``sort`` order, or None where none is kept.

    Parameters
    ----------
    session
        An open session; nothing is written.
    bench, facets
        The benchmark and its facets (the instance count decides whether to keep the order).
    flt, sort
        The resolved filter and a non-default sort: with the evidence version, the memo's key.
    conds
        ``flt`` as SQL conditions.
    key
        The sort's SQL value (:func:`~app.services.table.instance_sort.sort_key`).
    cache
        The caller's request memo: without one (or for a small benchmark) nothing is kept;
        with one, orders are kept in :data:`ORDER_CACHE`.

    Returns
    -------
    numpy.ndarray of int64, shape (n_rows,) or None
        Instance ids of every row of the filtered table, in table order.

    """
    if cache is None or sort.is_default or facets.summary.instances < KEEP_ORDER_FROM:
        return None

    def read() -> NDArray[np.int64]:
        # Kept in the store by the benchmark's warm-up (a restart finds it there), else read.
        kept = kept_arrays(session, bench, order_name(flt, sort))
        if kept is not None:
            return kept["ids"].astype(np.int64, copy=False)
        return _read_order(session, conds, key, sort)

    key_of_data = data_key(session, bench, evidence=True)
    return ORDER_CACHE.get_or_compute(("table-order", *key_of_data, flt, sort), read)


def order_name(flt: InstanceFilter, sort: TableSort) -> str:
    """The kept name of the order of the (resolved) filter ``flt`` and ``sort``."""
    return kept_name("order", flt.model_dump(mode="json"), str(sort))


def resolved_order_name(facets: BenchmarkFacets, flt: InstanceFilter, sort: TableSort) -> str:
    """:func:`order_name` of ``flt`` and ``sort`` resolved as a table request resolves them."""
    return order_name(resolve_filter(facets, flt), resolve_sort(facets, sort))


def read_order(
    session: Session, facets: BenchmarkFacets, flt: InstanceFilter, sort: TableSort
) -> NDArray[np.int64]:
    """The ids of ``flt``'s rows in ``sort`` order, read from the rows (what the warm-up keeps).

    Returns
    -------
    numpy.ndarray of int64, shape (n_rows,)

    """
    flt = resolve_filter(facets, flt)
    sort = resolve_sort(facets, sort)
    conds = filter_conditions(facets, flt, session.get_bind().dialect.name)
    return _read_order(session, conds, sort_key(facets, sort), sort)


def _read_order(
    session: Session,
    conds: Sequence[ColumnElement[bool]],
    key: ColumnElement[object],
    sort: TableSort,
) -> NDArray[np.int64]:
    query = select(Instance.id).where(*conds).order_by(*ordering(key, sort.descending))
    return np.fromiter(session.connection().scalars(query), dtype=np.int64)


def neighbour_ids(
    order: NDArray[np.int64], instance_id: int
) -> tuple[int | None, int | None] | None:
    """Ids before and after ``instance_id`` in ``order``; None if it is not in it."""
    where = np.flatnonzero(order == instance_id)
    if where.size == 0:
        return None
    at = int(where[0])
    before = int(order[at - 1]) if at > 0 else None
    after = int(order[at + 1]) if at + 1 < order.size else None
    return before, after


def external_ids(session: Session, ids: Sequence[int]) -> list[str]:
    """External ids of instances ``ids``, in that order."""
    if not len(ids):
        return []
    wanted = [int(i) for i in ids]
    query = select(Instance.id, Instance.external_id).where(Instance.id.in_(wanted))
    found = {iid: ext for iid, ext in session.connection().execute(query)}
    return [found[i] for i in wanted if i in found]
