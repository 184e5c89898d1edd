"""JSON API under ``/api``: the same reads as the pages, through the same services."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query

from app.db import transaction
from app.services.table.browse import MAX_PAGE_SIZE, InstancePage, benchmark_view
from app.services.table.facets import BenchmarkFacets, BenchmarkSummary, describe_benchmark
from app.services.table.facets import list_benchmarks as list_benchmark_summaries
from app.services.table.instance_filter import InstanceFilter
from app.services.table.instance_sort import TableSort
from app.services.table.instances import InstanceDetail, instance_detail
from app.web.deps import ReadCache, StoreDep
from app.web.error_docs import invalid
from app.web.filters import instance_filter, table_sort
from app.web.lane import Lane
from app.web.routers import json_router

router = json_router("benchmarks")

Filter = Annotated[InstanceFilter, Depends(instance_filter)]
Sort = Annotated[TableSort, Depends(table_sort)]


@router.get("/benchmarks")
def list_benchmarks(store: StoreDep, cache: ReadCache) -> list[BenchmarkSummary]:
    """Every benchmark with its counts (instances, groups, label sets, judges, ...)."""
    with transaction(store.factory) as session:
        return list_benchmark_summaries(session, cache)


@router.get("/benchmarks/{name}")
def get_benchmark(name: str, store: StoreDep, cache: ReadCache) -> BenchmarkFacets:
    """A benchmark's counts, label sets with value counts, judges, scored detectors, slices."""
    with transaction(store.factory) as session:
        return describe_benchmark(session, name, cache)


# Filters and sorts are checked against what the benchmark holds, not only their types.
TABLE_INVALID = invalid(
    "an unknown sort field, or a label set or detector the benchmark lacks to sort by (`sort`)",
    "a non-finite score bound (`score_min=nan`)",
    "a filter naming a label set, value or detector the benchmark lacks",
)


@router.get("/benchmarks/{name}/instances", responses=TABLE_INVALID)
async def list_instances(
    name: str,
    store: StoreDep,
    cache: ReadCache,
    lane: Lane,
    flt: Filter,
    sort: Sort,
    page: Annotated[int, Query(ge=1, le=10_000_000, description="1-based page.")] = 1,
    page_size: Annotated[
        int | None, Query(ge=1, le=MAX_PAGE_SIZE, description="Rows per page.")
    ] = None,
) -> InstancePage:
    """One page of the benchmark's instances in ``sort`` order, with the filtered total.

    ``sort=-score:DETECTOR&page_size=20`` gives the 20 highest-scored items; the default
    order is the natural order of external ids (``x:2`` before ``x:10``).
    """
    size = page_size or store.settings.page_size
    view = await lane.read(
        store, benchmark_view, name, flt, page=page, page_size=size, cache=cache, sort=sort
    )
    return view.table


@router.get("/benchmarks/{name}/instances/{external_id:path}", responses=TABLE_INVALID)
async def get_instance(
    name: str,
    external_id: str,
    store: StoreDep,
    cache: ReadCache,
    lane: Lane,
    flt: Filter,
    sort: Sort,
) -> InstanceDetail:
    """One instance with payload, label histories, judge outputs, scores and neighbours."""
    return await lane.read(store, instance_detail, name, external_id, flt, cache=cache, sort=sort)
