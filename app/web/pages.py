"""HTML pages: benchmark list, benchmark instance table (page or htmx fragment), instance page."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.orm import Session
from starlette.responses import HTMLResponse

from app.db import transaction
from app.services.accounts.users import Principal
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.flips import FLIP_PREFIX
from app.services.review.queues import default_choices
from app.services.table.browse import benchmark_view
from app.services.table.facets import benchmark_facets, list_benchmarks
from app.services.table.instance_filter import InstanceFilter
from app.services.table.instance_sort import TableSort
from app.services.table.instances import InstanceDetail, instance_detail
from app.sql.cache import VersionedCache
from app.store import Store
from app.tables import Role
from app.web.cells import ColumnChoice, sorted_column, table_columns
from app.web.deps import ReadCache, StoreDep
from app.web.filters import column_choice, instance_filter, table_sort
from app.web.lane import Lane
from app.web.params import DbCount, Page
from app.web.routers import page_router
from app.web.templating import is_fragment_request, render
from app.web.urls import benchmark_url, instance_url

router = page_router()

Filter = Annotated[InstanceFilter, Depends(instance_filter)]
Sort = Annotated[TableSort, Depends(table_sort)]
Cols = Annotated[tuple[str, ...] | None, Depends(column_choice)]


@router.get("/", response_class=HTMLResponse)
def index(request: Request, store: StoreDep, cache: ReadCache) -> HTMLResponse:
    """Every benchmark with its counts."""
    with transaction(store.factory) as session:
        benchmarks = list_benchmarks(session, cache)
    return render(request, "index.html", {"benchmarks": benchmarks})


@router.get("/benchmarks/{name}", response_class=HTMLResponse)
async def benchmark_page(
    request: Request,
    name: str,
    store: StoreDep,
    cache: ReadCache,
    lane: Lane,
    flt: Filter,
    sort: Sort,
    cols: Cols,
    page: Page = 1,
) -> HTMLResponse:
    """The filtered, sorted instance table; htmx gets the table fragment and the canonical URL.

    ``cols`` (the column chooser's choice) travels in the URL so that a pasted link shows the
    same columns; the column sorted by shows whatever the choice.
    """
    return await lane.run(_benchmark_page, request, name, store, cache, flt, sort, cols, page)


def _benchmark_page(
    request: Request,
    name: str,
    store: Store,
    cache: VersionedCache,
    flt: InstanceFilter,
    sort: TableSort,
    cols: tuple[str, ...] | None,
    page: int,
) -> HTMLResponse:
    with transaction(store.factory) as session:
        view = benchmark_view(
            session,
            name,
            flt,
            page=page,
            page_size=store.settings.page_size,
            cache=cache,
            sort=sort,
        )
    chosen = None if cols is None else frozenset(cols)
    choice = ColumnChoice(chosen, sorted_column(view.facets, view.table.order))
    cols_param = choice.param(table_columns(view.facets))
    headers = {}
    if is_fragment_request(request):
        headers["HX-Push-Url"] = benchmark_url(
            name, view.table.filter, page, view.table.sort, cols_param
        )
    context = {"view": view, "choice": choice, "cols_param": cols_param}
    return render(request, "benchmark.html", context, fragment="_table.html", headers=headers)


@router.get("/benchmarks/{name}/instances/{external_id:path}", response_class=HTMLResponse)
async def instance_page(
    request: Request,
    name: str,
    external_id: str,
    store: StoreDep,
    cache: ReadCache,
    lane: Lane,
    flt: Filter,
    sort: Sort,
    cols: Cols,
    page: Annotated[DbCount | None, Query(ge=1, description="Table page to go back to.")] = None,
) -> HTMLResponse:
    """One instance in full; previous/next follow the table view the reviewer came from.

    The table's ``cols`` travel along, so "back to table" shows the same columns.
    """
    return await lane.run(
        _instance_page, request, name, external_id, store, cache, flt, sort, cols, page
    )


def _instance_page(
    request: Request,
    name: str,
    external_id: str,
    store: Store,
    cache: VersionedCache,
    flt: InstanceFilter,
    sort: TableSort,
    cols: tuple[str, ...] | None,
    page: int | None,
) -> HTMLResponse:
    return instance_response(
        request, store, cache, name, external_id, flt, sort, page, cols=cols_values(cols)
    )


def cols_values(cols: tuple[str, ...] | None) -> list[str] | None:
    """``cols`` as query values again (``[""]``: none chosen, which an absent one is not)."""
    if cols is None:
        return None
    return list(cols) or [""]


def instance_response(
    request: Request,
    store: Store,
    cache: VersionedCache,
    name: str,
    external_id: str,
    flt: InstanceFilter | None = None,
    sort: TableSort | None = None,
    page: int | None = None,
    *,
    cols: list[str] | None = None,
    relabel_error: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    """The instance page; with ``relabel_error`` shown beside the relabel form (a refusal).

    ``cols`` are the table's chosen columns (``cols`` values), kept by the links back to it.
    """
    with transaction(store.factory) as session:
        detail = instance_detail(session, name, external_id, flt, cache=cache, sort=sort)
        choices = relabel_choices(session, request, detail, cache)
    headers = {}
    if is_fragment_request(request):
        headers["HX-Push-Url"] = instance_url(
            name, external_id, detail.filter, page, detail.sort, cols
        )
    context = {
        "d": detail,
        "page": page,
        "cols_param": cols,
        "relabel": choices,
        "relabel_error": relabel_error,
    }
    response = render(request, "instance.html", context, fragment="_instance.html", headers=headers)
    response.status_code = status_code
    return response


def relabel_choices(
    session: Session, request: Request, detail: InstanceDetail, cache: VersionedCache
) -> dict[str, list[str]] | None:
    """Label set -> the values a reviewer may relabel it to; None for those who may not.

    Derived sets (a judge's flips) are not relabelled: they follow from its judgments. The
    values come from the benchmark's facets in the request memo (the page read them already).
    """
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is None or not principal.can(Role.reviewer):
        return None
    bench = get_benchmark(session, detail.benchmark)
    facets = benchmark_facets(session, bench, cache)
    return {
        s.name: default_choices(session, bench, s.name, facets)
        for s in detail.labels
        if not s.name.startswith(FLIP_PREFIX)
    }
