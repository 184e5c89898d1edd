"""The instance table of a benchmark: one filtered page of rows and the filtered count.

The page's ids come from one indexed query (ordered by external id); labels, judgments and
scores of those rows then come from a few ``IN`` queries, never one query per row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.services.cache import VersionedCache
from app.services.facets import BenchmarkFacets, benchmark_facets, get_benchmark
from app.services.instance_filter import InstanceFilter, filter_conditions, resolve_filter
from app.services.labels import current_labels
from app.services.payload_fields import PREVIEW_FIELD, payload_text, preview
from app.tables import Instance, Judgment, Order, Score

MAX_PAGE_SIZE = 500


class JudgeCells(BaseModel):
    """One judge's verdicts on one pair: AB and BA choices (identities) and the flip label."""

    model_config = ConfigDict(frozen=True)

    ab: str | None = None
    ba: str | None = None
    ab_confidence: float | None = None
    ba_confidence: float | None = None
    flip: str | None = None


class InstanceRow(BaseModel):
    """One row of the instance table."""

    model_config = ConfigDict(frozen=True)

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
    page: int
    page_size: int
    total: int
    pages: int
    items: list[InstanceRow]

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
) -> BenchmarkView:
    """One filtered page of benchmark ``name`` with the facets that describe its filters.

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
        Memo for facets and filtered counts, keyed on the benchmark's ``data_version``.

    Returns
    -------
    BenchmarkView

    Raises
    ------
    NotFound
        No such benchmark.
    InvalidInput
        A condition names something the benchmark does not have.

    """
    if page < 1 or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ValueError("page must be >= 1 and page_size in 1..MAX_PAGE_SIZE")
    bench = get_benchmark(session, name)
    facets = benchmark_facets(session, bench, cache)
    flt = resolve_filter(facets, flt)
    dialect = session.get_bind().dialect.name
    conds = filter_conditions(facets, flt, dialect)

    def count() -> int:
        return int(session.scalar(select(func.count(Instance.id)).where(*conds)) or 0)

    if flt.is_empty:
        total = facets.summary.instances
    elif cache is None:
        total = count()
    else:
        total = cache.get_or_compute(("count", bench.id, bench.data_version, flt), count)
    ids = list(
        session.connection().scalars(
            select(Instance.id)
            .where(*conds)
            .order_by(Instance.external_id)
            .limit(page_size)
            .offset((page - 1) * page_size)
        )
    )
    table = InstancePage(
        benchmark=bench.name,
        filter=flt,
        page=page,
        page_size=page_size,
        total=total,
        pages=max(1, math.ceil(total / page_size)),
        items=_rows(session, facets, ids, dialect),
    )
    return BenchmarkView(facets=facets, table=table)


def _rows(
    session: Session, facets: BenchmarkFacets, ids: Sequence[int], dialect: str
) -> list[InstanceRow]:
    if not ids:
        return []
    # Plain Core reads on the session's connection: the ORM layer adds about half a
    # millisecond per statement here and maps nothing.
    conn = session.connection()
    slice_fields = [s.field for s in facets.slices]
    base = conn.execute(
        select(
            Instance.id,
            Instance.external_id,
            Instance.group_key,
            preview(dialect, PREVIEW_FIELD.get(facets.summary.kind, "prompt")),
            *(payload_text(dialect, f) for f in slice_fields),
        ).where(Instance.id.in_(ids))
    ).all()
    labels = current_labels(session, ids)
    judge_names = {j.id: j.name for j in facets.judges}
    judges: dict[int, dict[str, dict[str, object]]] = {i: {} for i in ids}
    for iid, det_id, order, choice, confidence in conn.execute(
        select(
            Judgment.instance_id,
            Judgment.detector_id,
            Judgment.order,
            Judgment.choice,
            Judgment.confidence,
        ).where(Judgment.instance_id.in_(ids), Judgment.order.in_([Order.AB.value, Order.BA.value]))
    ):
        if det_id not in judge_names:
            continue
        cells = judges[iid].setdefault(judge_names[det_id], {})
        key = "ab" if order == Order.AB.value else "ba"
        cells[key] = choice
        cells[f"{key}_confidence"] = confidence
    detector_names = {d.id: d.name for d in facets.scored_detectors}
    scores: dict[int, dict[str, float]] = {i: {} for i in ids}
    for iid, det_id, score in conn.execute(
        select(Score.instance_id, Score.detector_id, Score.score).where(Score.instance_id.in_(ids))
    ):
        if det_id in detector_names:
            scores[iid][detector_names[det_id]] = score
    flip_labels = {j.name: j.flip_label for j in facets.judges}
    by_id = {}
    for iid, external_id, group_key, text, *slice_values in base:
        row_labels = labels.get(iid, {})
        row_judges = {}
        for name in flip_labels:
            cells = dict(judges[iid].get(name, {}))
            flip_label = flip_labels[name]
            cells["flip"] = row_labels.get(flip_label) if flip_label else None
            # Values come typed from the database: construct without re-validating.
            row_judges[name] = JudgeCells.model_construct(**cells)
        by_id[iid] = InstanceRow.model_construct(
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
    return [by_id[i] for i in ids]
