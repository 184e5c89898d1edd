"""JSON API under ``/api``: the same reads as the pages, through the same services."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from app.services.browse import MAX_PAGE_SIZE, InstancePage, benchmark_view
from app.services.facets import BenchmarkFacets, BenchmarkSummary, describe_benchmark
from app.services.facets import list_benchmarks as list_benchmark_summaries
from app.services.instance_filter import InstanceFilter
from app.services.instances import InstanceDetail, instance_detail
from app.web.deps import DbSession, ReadCache
from app.web.filters import instance_filter

router = APIRouter(prefix="/api", tags=["benchmarks"])

Filter = Annotated[InstanceFilter, Depends(instance_filter)]


@router.get("/benchmarks")
def list_benchmarks(session: DbSession, cache: ReadCache) -> list[BenchmarkSummary]:
    """Every benchmark with its counts (instances, groups, label sets, judges, ...)."""
    return list_benchmark_summaries(session, cache)


@router.get("/benchmarks/{name}")
def get_benchmark(name: str, session: DbSession, cache: ReadCache) -> BenchmarkFacets:
    """A benchmark's counts, label sets with value counts, judges, scored detectors, slices."""
    return describe_benchmark(session, name, cache)


@router.get("/benchmarks/{name}/instances")
def list_instances(
    request: Request,
    name: str,
    session: DbSession,
    cache: ReadCache,
    flt: Filter,
    page: Annotated[int, Query(ge=1, le=10_000_000, description="1-based page.")] = 1,
    page_size: Annotated[
        int | None, Query(ge=1, le=MAX_PAGE_SIZE, description="Rows per page.")
    ] = None,
) -> InstancePage:
    """One page of the benchmark's instances, ordered by external id, with the filtered total."""
    view = benchmark_view(
        session,
        name,
        flt,
        page=page,
        page_size=page_size or request.app.state.settings.page_size,
        cache=cache,
    )
    return view.table


@router.get("/benchmarks/{name}/instances/{external_id:path}")
def get_instance(
    name: str, external_id: str, session: DbSession, cache: ReadCache, flt: Filter
) -> InstanceDetail:
    """One instance with payload, label histories, judge outputs, scores and neighbours."""
    return instance_detail(session, name, external_id, flt, cache=cache)
