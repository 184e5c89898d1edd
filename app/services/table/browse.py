"""The instance table of a benchmark: one filtered page of rows and the filtered count.

The page's external ids come from one index-only query; the rows, their labels, judgments
and scores then come from a few ``IN`` queries, never one query per row. Rows are
typed dicts: this is the hot path of the dashboard, and a model per row and per cell costs
more than the queries.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, Connection, Select, and_, bindparam, func, or_, select
from sqlalchemy.orm import Session
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labels import is_original
from app.services.evidence.payload_fields import PREVIEW_FIELD, payload_text, preview
from app.services.table.facets import BenchmarkFacets, benchmark_facets, evidence_key
from app.services.table.instance_filter import (
    InstanceFilter,
    filter_conditions,
    plan_for_one_page,
    resolve_filter,
)
from app.services.table.instance_sort import TableSort, ordering, resolve_sort, sort_key
from app.services.table.table_order import external_ids, kept_order
from app.sql.cache import VersionedCache
from app.tables import Instance, Judgment, LabelEvent, Order, Score

MAX_PAGE_SIZE = 500
# Pages starting this many rows in are located from cached page boundaries, not OFFSET.
DEEP_OFFSET = 1000


class JudgeCells(TypedDict):
    """One judge's verdicts on one pair: AB and BA choices (identities) and the flip label."""

    ab: str | None
    ba: str | None
    ab_confidence: float | None
    ba_confidence: float | None
    flip: str | None


class InstanceRow(TypedDict):
    """One row of the instance table."""

    external_id: str
    group_key: str
    preview: str
    slices: dict[str, str | None]
    labels: dict[str, str]
    judges: dict[str, JudgeCells]
    scores: dict[str, float]


class InstancePage(BaseModel):
    """One page of the filtered instance table."""

    model_config = ConfigDict(frozen=True)

    benchmark: str
    filter: InstanceFilter
    sort: str
    page: int
    page_size: int
    total: int
    pages: int
    items: list[InstanceRow]

    @property
    def order(self) -> TableSort:
        """The rows' order (``sort`` parsed)."""
        return TableSort.parse(self.sort)

    @property
    def first_index(self) -> int:
        """1-based position of the first row on this page (0 when the page is empty)."""
        return (self.page - 1) * self.page_size + 1 if self.items else 0

    @property
    def last_index(self) -> int:
        """1-based position of the last row on this page."""
        return (self.page - 1) * self.page_size + len(self.items)


class BenchmarkView(BaseModel):
    """What the benchmark page shows: the benchmark's facets and one page of its table."""

    model_config = ConfigDict(frozen=True)

    facets: BenchmarkFacets
    table: InstancePage


def benchmark_view(
    session: Session,
    name: str,
    flt: InstanceFilter,
    *,
    page: int = 1,
    page_size: int = 50,
    cache: VersionedCache | None = None,
    sort: TableSort | None = None,
) -> BenchmarkView:
    """One filtered, sorted page of benchmark ``name`` with the facets that describe its filters.

    Parameters
    ----------
    session : Session
        An open session; nothing is written.
    name : str
        Benchmark name.
    flt : InstanceFilter
        Conditions as parsed from the request; checked and canonicalised here.
    page : int
        1-based page number; a page past the end is empty.
    page_size : int
        Rows per page, 1 to ``MAX_PAGE_SIZE``.
    cache : VersionedCache, optional
        Memo for facets, filtered counts and the first key of each deep page, keyed on the
        benchmark's ``data_version``.
    sort : TableSort, optional
        Row order; default the natural order of external ids. Ties go by instance id.

    Returns
    -------
    BenchmarkView

    Raises
    ------
    NotFound
        No such benchmark.
    InvalidInput
        A condition or the sort names something the benchmark does not have.

    """
    if page < 1 or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ValueError("page must be >= 1 and page_size in 1..MAX_PAGE_SIZE")
    bench = get_benchmark(session, name)
    facets = benchmark_facets(session, bench, cache)
    flt = resolve_filter(facets, flt)
    sort = resolve_sort(facets, sort or TableSort())
    dialect = session.get_bind().dialect.name
    conds = filter_conditions(facets, flt, dialect)

    def count() -> int:
        counting = filter_conditions(facets, flt, dialect, counting=True)
        return int(session.scalar(select(func.count(Instance.id)).where(*counting)) or 0)

    if flt.is_empty:
        total = facets.summary.instances
    elif cache is None:
        total = count()
    else:
        total = cache.get_or_compute(("count", *evidence_key(bench), flt), count)
    if sort.is_default:
        starts = None
        if cache is not None and (page - 1) * page_size >= DEEP_OFFSET:
            # Built before plan_for_one_page: numbering every match wants a sort on PostgreSQL.
            starts = cache.get_or_compute(
                ("page_starts", *evidence_key(bench), flt, page_size),
                lambda: _page_starts(session, facets, flt, dialect, page_size),
            )
        plan_for_one_page(session)
        keys = _page_keys(session, conds, page, page_size, starts)
    else:
        key = sort_key(facets, sort)
        order = kept_order(session, bench, facets, flt, sort, conds, key, cache)
        if order is None:
            keys = _sorted_page_keys(session, conds, key, sort, page, page_size)
        else:
            keys = external_ids(session, order[(page - 1) * page_size : page * page_size])
    # Rows are built from typed columns above; validating 50 nested dicts again would cost
    # as much as reading them.
    table = InstancePage.model_construct(
        benchmark=bench.name,
        filter=flt,
        sort=str(sort),
        page=page,
        page_size=page_size,
        total=total,
        pages=max(1, math.ceil(total / page_size)),
        items=_rows(session, facets, keys, dialect),
    )
    return BenchmarkView(facets=facets, table=table)


_NATURAL_ORDER = (Instance.sort_key, Instance.id)


def _page_keys(
    session: Session,
    conds: Sequence[ColumnElement[bool]],
    page: int,
    page_size: int,
    starts: Sequence[tuple[str, int]] | None,
) -> list[str]:
    """External ids on ``page`` in natural order (seeking its first key if ``starts`` lists it)."""
    # The (benchmark_id, sort_key) index gives the order; the id only breaks ties between
    # ids that differ in leading zeros.
    query = select(Instance.external_id).where(*conds).order_by(*_NATURAL_ORDER)
    if starts is None:
        query = query.offset((page - 1) * page_size)
    elif page > len(starts):
        return []
    else:
        # A deep OFFSET walks and filters every row before the page (2-4 ms per request at
        # 100,000 instances); seeking to the page's first key reads one page's worth.
        key, iid = starts[page - 1]
        query = query.where(
            or_(Instance.sort_key > key, and_(Instance.sort_key == key, Instance.id >= iid))
        )
    return list(session.connection().scalars(query.limit(page_size)))


def _sorted_page_keys(
    session: Session,
    conds: Sequence[ColumnElement[bool]],
    key: ColumnElement[object],
    sort: TableSort,
    page: int,
    page_size: int,
) -> list[str]:
    """External ids on ``page`` of the table ordered by ``key`` (nulls last), then id."""
    query = (
        select(Instance.external_id)
        .where(*conds)
        .order_by(*ordering(key, sort.descending))
        .offset((page - 1) * page_size)
        .limit(page_size)
    )
    return list(session.connection().scalars(query))


def _page_starts(
    session: Session, facets: BenchmarkFacets, flt: InstanceFilter, dialect: str, page_size: int
) -> list[tuple[str, int]]:
    """``(sort key, id)`` of the first row of every page of the filtered table, in one scan."""
    counting = filter_conditions(facets, flt, dialect, counting=True)
    numbered = (
        select(
            Instance.sort_key,
            Instance.id,
            func.row_number().over(order_by=_NATURAL_ORDER).label("n"),
        )
        .where(*counting)
        .subquery()
    )
    query = (
        select(numbered.c.sort_key, numbered.c.id)
        .where((numbered.c.n - 1) % page_size == 0)
        .order_by(numbered.c.sort_key, numbered.c.id)
    )
    return [(key, iid) for key, iid in session.connection().execute(query)]


_IDS = bindparam("ids", expanding=True)
_KEYS = bindparam("keys", expanding=True)
# Built once: these run on every table page.
_ROW_LABELS = (
    select(LabelEvent.instance_id, LabelEvent.label_name, LabelEvent.value)
    .where(LabelEvent.instance_id.in_(_IDS), is_original())
    .order_by(LabelEvent.instance_id, LabelEvent.label_name, LabelEvent.id)
)
_ROW_JUDGMENTS = select(
    Judgment.instance_id,
    Judgment.detector_id,
    Judgment.order,
    Judgment.choice,
    Judgment.confidence,
).where(Judgment.instance_id.in_(_IDS), Judgment.order.in_([Order.AB.value, Order.BA.value]))
_AB = Order.AB.value
_ROW_SCORES = select(Score.instance_id, Score.detector_id, Score.score).where(
    Score.instance_id.in_(_IDS)
)


def _current_labels(conn: Connection, ids: Sequence[int]) -> dict[int, dict[str, str]]:
    # Same rule as labels.current_labels (the latest original event wins, a null retracts),
    # read as one index-ordered range instead of a grouped subquery: a page has few events.
    out: dict[int, dict[str, str]] = {i: {} for i in ids}
    for iid, name, value in conn.execute(_ROW_LABELS, {"ids": ids}):
        if value is None:
            out[iid].pop(name, None)
        else:
            out[iid][name] = value
    return out


@functools.lru_cache(maxsize=64)
def _base_statement(dialect: str, preview_field: str, slice_fields: tuple[str, ...]) -> Select[Any]:
    # Built (and its cache key computed) once per table shape, not on every page.
    return select(
        Instance.id,
        Instance.external_id,
        Instance.group_key,
        preview(dialect, preview_field),
        *(payload_text(dialect, f) for f in slice_fields),
    ).where(Instance.benchmark_id == bindparam("benchmark_id"), Instance.external_id.in_(_KEYS))


def _rows(
    session: Session, facets: BenchmarkFacets, keys: Sequence[str], dialect: str
) -> list[InstanceRow]:
    if not keys:
        return []
    # Plain Core reads on the session's connection: the ORM layer adds about half a
    # millisecond per statement here and maps nothing.
    conn = session.connection()
    slice_fields = tuple(s.field for s in facets.slices)
    base_query = _base_statement(
        dialect, PREVIEW_FIELD.get(facets.summary.kind, "prompt"), slice_fields
    )
    by_key = {
        row[1]: row
        for row in conn.execute(base_query, {"benchmark_id": facets.id, "keys": list(keys)})
    }
    base = [by_key[k] for k in keys if k in by_key]
    ids = [row[0] for row in base]
    params = {"ids": ids}
    labels = _current_labels(conn, ids)
    judge_names = {j.id: j.name for j in facets.judges}
    judges: dict[int, dict[str, JudgeCells]] = {i: {} for i in ids}
    for iid, det_id, order, choice, confidence in conn.execute(_ROW_JUDGMENTS, params):
        name = judge_names.get(det_id)
        if name is None:
            continue
        cells = judges[iid].get(name)
        if cells is None:
            cells = judges[iid][name] = _no_verdicts()
        if order == _AB:
            cells["ab"], cells["ab_confidence"] = choice, confidence
        else:
            cells["ba"], cells["ba_confidence"] = choice, confidence
    detector_names = {d.id: d.name for d in facets.scored_detectors}
    scores: dict[int, dict[str, float]] = {i: {} for i in ids}
    for iid, det_id, score in conn.execute(_ROW_SCORES, params):
        name = detector_names.get(det_id)
        if name is not None:
            scores[iid][name] = score
    flip_labels = [(j.name, j.flip_label) for j in facets.judges]
    rows: list[InstanceRow] = []
    for iid, external_id, group_key, text, *slice_values in base:
        row_labels = labels[iid]
        row_judges: dict[str, JudgeCells] = {}
        for name, flip_label in flip_labels:
            cells = judges[iid].get(name) or _no_verdicts()
            cells["flip"] = row_labels.get(flip_label) if flip_label else None
            row_judges[name] = cells
        rows.append(
            InstanceRow(
                external_id=external_id,
                group_key=group_key,
                preview=text or "",
                slices={
                    f: None if v is None else str(v)
                    for f, v in zip(slice_fields, slice_values, strict=True)
                },
                labels=row_labels,
                judges=row_judges,
                scores=scores[iid],
            )
        )
    return rows


def _no_verdicts() -> JudgeCells:
    return JudgeCells(ab=None, ba=None, ab_confidence=None, ba_confidence=None, flip=None)
