"""Confident-disagreement page, its CSV export and its JSON twin.

Thin routes over :mod:`app.services.disagreements.lists`; every choice lives in the query string,
read by one dependency into a
:class:`~app.services.disagreements.disagreement_query.DisagreementQuery`. The page's form, the
API's documented parameters and its response model are built from the registered modes'
declarations. A reviewer ticks rows of the list and sends them to a queue (a new one, or one
of the benchmark's) or marks them as defects (:mod:`app.services.review.selection`).
"""

from __future__ import annotations

import io
import re
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlencode

from fastapi import Depends, Form, Request
from pydantic import BaseModel, Field, create_model
from sqlalchemy.orm import Session
from starlette.responses import HTMLResponse, Response

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.export import csv_safe
from app.services.disagreements.disagreement_query import (
    DEFAULT_MODE,
    DisagreementQuery,
    mode_param_names,
    parse_disagreement_query,
)
from app.services.disagreements.disagreement_results import (
    ListRequest,
    RankedList,
    Save,
    save_ranked,
)
from app.services.disagreements.disagreement_view import disagreement_view, opening_query
from app.services.disagreements.lists import MODES, find_disagreements
from app.services.disagreements.modes import all_modes, modes_declaring
from app.services.disagreements.modes.base import Param, ParamKind
from app.services.evidence.benchmarks import get_benchmark
from app.services.review import selection
from app.services.review.queues import MAX_REASON, benchmark_tags
from app.services.table.facets import describe_benchmark
from app.sql.cache import VersionedCache
from app.store import Store
from app.tables import Benchmark
from app.web.auth import Reviewer
from app.web.benchmark_params import default_label
from app.web.deps import ReadCache, StoreDep
from app.web.error_docs import invalid
from app.web.params import DbId, Page
from app.web.responses import redirect_after_post
from app.web.routers import json_router, page_router
from app.web.templating import is_fragment_request, render
from app.web.urls import disagreements_url, with_query

router = page_router()
api_router = json_router("disagreements")

DEFAULT_LIMIT = 1000
PAGE_ROWS = 100
"""Rows per page of the HTML list: a warm page reads previews and draws rows for its own
rows only (the CSV and the API return every listed item)."""


async def disagreement_query(request: Request) -> DisagreementQuery:
    """The query string as a :class:`DisagreementQuery` (one parser for page, CSV and API).

    Blank values are unset and parameters the chosen mode does not declare are dropped; the
    limit defaults to :data:`DEFAULT_LIMIT`. ``async``: it does no I/O.
    """
    params = request.query_params
    query = parse_disagreement_query({key: params.getlist(key) for key in params})
    return query if query.limit is not None else query.with_limit(DEFAULT_LIMIT)


DisagreementParams = Annotated[DisagreementQuery, Depends(disagreement_query)]


def _owners(name: str) -> str:
    return ", ".join(m.name for m in modes_declaring(name))


def _declared(name: str) -> Param:
    param = modes_declaring(name)[0].param(name)
    assert param is not None
    return param


def _schema(param: Param) -> dict[str, Any]:
    """The OpenAPI schema of a mode parameter's query value."""
    kinds = {ParamKind.NUMBER: "number", ParamKind.INTEGER: "integer", ParamKind.JUDGE: "string"}
    schema: dict[str, Any] = {"type": kinds[param.kind]}
    if param.low is not None:
        schema["exclusiveMinimum" if param.low_open else "minimum"] = param.low
    if param.high is not None:
        schema["maximum"] = param.high
    return schema


def _query_parameter(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _documented_parameters() -> list[dict[str, Any]]:
    """The query parameters of the API route, for ``/openapi.json`` (read by one dependency)."""
    modes = "; ".join(f"`{m.name}`: {m.help}" for m in all_modes())
    out = [
        _query_parameter(
            "detector",
            "Detector name (repeatable: consensus mode takes several).",
            {"type": "array", "items": {"type": "string"}},
        ),
        _query_parameter(
            "label", "Label set; default `reference` (else the first).", {"type": "string"}
        ),
        _query_parameter(
            "mode", modes, {"type": "string", "enum": list(MODES), "default": DEFAULT_MODE}
        ),
        _query_parameter(
            "positive", "Positive class of the label set (binary modes).", {"type": "string"}
        ),
        _query_parameter(
            "limit",
            "Most items listed.",
            {"type": "integer", "minimum": 0, "default": DEFAULT_LIMIT},
        ),
    ]
    for name in mode_param_names():
        param = _declared(name)
        note = f"{param.help} Modes: {_owners(name)}; ignored by the others. Blank: unset."
        out.append(_query_parameter(name, note, _schema(param)))
    return out


class DisagreementItemOut(BaseModel):
    """One ranked item."""

    external_id: str
    label: str | None
    score: float | None
    confidence: float | None
    reason: str
    evidence: dict[str, Any] | None = Field(
        None,
        description=(
            "Structured evidence (label-errors mode: the models' votes, the plurality, the "
            "strongest other option and its share of the answers, and the experts' verdict "
            "where the benchmark has an errata label set)."
        ),
    )


def _list_model() -> type[BaseModel]:
    """The API's response model: the list's fields and every declared mode parameter.

    A parameter the list's mode does not declare is absent from a response, except
    ``min_confidence``, ``k`` and ``judge``, which are always present (``null`` if unused).
    """
    params: dict[str, Any] = {
        name: (
            _declared(name).python_type | None,
            Field(None, description=f"{_declared(name).help} ({_owners(name)})"),
        )
        for name in mode_param_names()
    }
    model: type[BaseModel] = create_model(
        "DisagreementListOut",
        __doc__="A ranked list of disagreements and the parameters that produced it.",
        benchmark=(str, ...),
        label=(str, ...),
        mode=(str, ...),
        detectors=(list[str], ...),
        positive=(str | None, ...),
        **params,
        total=(int, Field(description="Items before the limit.")),
        items=(list[DisagreementItemOut], ...),
    )
    return model


DisagreementListOut = _list_model()


def _saver(store: Store) -> Save:
    """Store a list ranked in a request, in a short write transaction of its own.

    The request reads in a plain transaction; on SQLite, turning it into a writer could fail
    beside another writer, which a write transaction (``Store.write_factory``) waits for.
    """

    def save(
        _: Session, bench: Benchmark, request: ListRequest, ranked: RankedList, seconds: float
    ) -> None:
        with transaction(store.write_factory) as session:
            save_ranked(session, bench, request, ranked, seconds)

    return save


@router.get("/benchmarks/{name}/disagreements", response_class=HTMLResponse)
def disagreements_page(
    request: Request,
    name: str,
    store: StoreDep,
    cache: ReadCache,
    query: DisagreementParams,
    page: Page = 1,
) -> HTMLResponse:
    """Ranked confident disagreements with links to the items, and a CSV link.

    The form shows the chosen mode's parameters; htmx swaps the form and the list together,
    so changing the mode changes the fields. The listed items are shown :data:`PAGE_ROWS`
    at a time (``page``, 1-based).
    """
    with transaction(store.factory) as session:
        facets = describe_benchmark(session, name, cache)
        if "mode" not in request.query_params:
            query = opening_query(get_benchmark(session, name), query)
        view = disagreement_view(
            session,
            facets,
            query.with_label(default_label(facets, query.label)),
            save=_saver(store),
            page=((page - 1) * PAGE_ROWS, page * PAGE_ROWS),
        )
        rows = [] if view.result is None else [d.instance_id for d in view.result.items]
        # What the selection form offers: the benchmark's queues, and which rows are marked.
        bench = get_benchmark(session, name)
        bench_queues = selection.benchmark_queues(session, bench)
        defect_tags = benchmark_tags(session, bench)
        marked = selection.marked_defects(session, rows)
    params = view.query.as_params(default_limit=DEFAULT_LIMIT)
    listed = 0 if view.result is None else view.result.listed

    def page_url(n: int) -> str:
        return disagreements_url(name, **params, page=None if n == 1 else n)

    context = {
        "name": name,
        "facets": facets,
        "view": view,
        "modes": [m for m in all_modes() if m.applies_to(facets.summary.kind)],
        "values": view.query.values,
        "csv_url": disagreements_url(name, csv_export=True, **params),
        "page": page,
        "pages": max(1, -(-listed // PAGE_ROWS)),
        "page_url": page_url,
        "list_query": with_query("", {**params, "page": None if page == 1 else page})[1:],
        "queues": bench_queues,
        "marked": marked,
        "defect_tags": defect_tags,
        "max_reason": MAX_REASON,
        # The experts' column shows where the benchmark has their verdicts (label-errors).
        "verdicts": any(
            d.evidence is not None and "verdict" in d.evidence
            for d in (view.result.items if view.result is not None else [])
        ),
    }
    headers = {}
    if is_fragment_request(request):
        # The canonical URL: blank fields and other modes' parameters left out.
        headers["HX-Push-Url"] = page_url(page)
    return render(
        request,
        "disagreements.html",
        context,
        fragment="_disagreements_view.html",
        headers=headers,
    )


CSV_COLUMNS = ("rank", "external_id", "label", "score", "confidence", "reason")


def _labelled(
    session: Session, name: str, cache: VersionedCache, query: DisagreementQuery
) -> DisagreementQuery:
    """``query`` against its label set, or the benchmark's default one."""
    return query.with_label(default_label(describe_benchmark(session, name, cache), query.label))


@router.get("/benchmarks/{name}/disagreements.csv")
def disagreements_csv(
    name: str, store: StoreDep, cache: ReadCache, query: DisagreementParams
) -> Response:
    """The same ranked list as the page, as CSV (one row per item, full-precision numbers)."""
    with transaction(store.factory) as session:
        labelled = _labelled(session, name, cache, query)
        result = find_disagreements(session, name, labelled, save=_saver(store))
    buf = io.StringIO()
    writer = csv_safe.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for rank, item in enumerate(result.items, start=1):
        writer.writerow(
            [
                rank,
                item.external_id,
                "" if item.label is None else item.label,
                "" if item.score is None else repr(item.score),
                "" if item.confidence is None else repr(item.confidence),
                item.reason,
            ]
        )
    # The filename is ASCII-safe: benchmark names may hold anything.
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "benchmark"
    return Response(
        buf.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="{safe}-disagreements-{query.mode}.csv"'
        },
    )


@api_router.get(
    "/benchmarks/{name}/disagreements",
    response_model=DisagreementListOut,
    response_model_exclude_unset=True,
    openapi_extra={"parameters": _documented_parameters()},
    responses=invalid(
        "a mode that needs a judge without one (`judge`), or a judge not judged in both orders",
        "a mode for another kind of benchmark, or with the wrong number of detectors",
        "a detector with no scores on the benchmark, or `k` outside 1 to the detectors",
        "a label set that is not binary without `positive`",
    ),
)
def api_disagreements(
    name: str, store: StoreDep, cache: ReadCache, query: DisagreementParams
) -> dict[str, Any]:
    """The ranked list (the object of ``appellate disagreements --json``)."""
    with transaction(store.factory) as session:
        labelled = _labelled(session, name, cache, query)
        return find_disagreements(session, name, labelled, save=_saver(store)).as_dict()


# ----------------------------------------------------------------------------- selections


def _back(name: str, list_query: str) -> str:
    """The list page a selection came from (its query string), at its results."""
    # Only a query string is taken from the form, decoded and encoded again: the redirect
    # stays on this list's page and carries no character a header cannot.
    query = urlencode(parse_qsl(list_query.lstrip("?").partition("#")[0], keep_blank_values=True))
    return disagreements_url(name) + (f"?{query}" if query else "") + "#results"


@router.post("/benchmarks/{name}/disagreements/queue")
def queue_selected(
    request: Request,
    name: str,
    store: StoreDep,
    principal: Reviewer,
    item: Annotated[list[DbId] | None, Form()] = None,
    queue: Annotated[str, Form()] = "new",
    queue_name: Annotated[str, Form(max_length=200)] = "",
    label: Annotated[str, Form(max_length=200)] = "",
    list_query: Annotated[str, Form(max_length=4000)] = "",
) -> Response:
    """Send the ticked rows to a queue: a new one named ``queue_name``, or queue ``queue``.

    A new queue votes on the list's label set (``label``) and records the list it came from;
    the browser then opens it. Added to an existing queue, the items follow its last one and
    the browser goes back to the list.
    """
    with transaction(store.write_factory) as session:
        bench = get_benchmark(session, name)
        if queue == "new":
            created = selection.queue_selection(
                session, bench, item or [], name=queue_name, label_name=label,
                query=list_query, created_by=principal.name,
            )  # fmt: skip
            return redirect_after_post(request, f"/queues/{created.id}")
        if not re.fullmatch(r"[0-9]{1,9}", queue):
            raise InvalidInput(f"no queue {queue!r}: choose one of the list", field="queue")
        selection.add_to_queue(session, bench, int(queue), item or [])
    return redirect_after_post(request, _back(name, list_query))


@router.post("/benchmarks/{name}/disagreements/defects")
def mark_selected(
    request: Request,
    name: str,
    store: StoreDep,
    principal: Reviewer,
    item: Annotated[list[DbId] | None, Form()] = None,
    reason: Annotated[str, Form(max_length=MAX_REASON)] = "",
    tag: Annotated[str, Form(max_length=200)] = "",
    list_query: Annotated[str, Form(max_length=4000)] = "",
) -> Response:
    """Mark the ticked rows as defects (adjudications of ``defect``), then show the list."""
    with transaction(store.write_factory) as session:
        bench = get_benchmark(session, name)
        selection.mark_defects(
            session, bench, item or [], principal, reason=reason, tags=[tag] if tag else []
        )
    return redirect_after_post(request, _back(name, list_query))
