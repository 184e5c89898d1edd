"""Confident-disagreement page, its CSV export and its JSON twin.

Thin routes over :mod:`app.services.disagreements`; every choice lives in the query string.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy.orm import Session
from starlette.responses import HTMLResponse, Response

from app.db import transaction
from app.services.disagreements import MODES, disagreements
from app.services.facets import describe_benchmark
from app.web.benchmark_params import DetectorParam, LabelParam, default_label, non_blank
from app.web.deps import ReadCache, StoreDep
from app.web.filters import Blank
from app.web.templating import render
from app.web.urls import disagreements_url

router = APIRouter(include_in_schema=False)
api_router = APIRouter(prefix="/api", tags=["disagreements"])

DEFAULT_LIMIT = 1000

ModeParam = Annotated[str, Query(description=f"One of {', '.join(MODES)}.")]
ConfParam = Annotated[
    float | None, Blank, Query(ge=0.0, le=1.0, description="Cut on P(other class).")
]
KParam = Annotated[int | None, Blank, Query(ge=1, description="Consensus quorum.")]
LimitParam = Annotated[int, Query(ge=0, le=1_000_000, description="Most items listed.")]
JudgeParam = Annotated[
    str | None, Blank, Query(description="Judge (detector-vs-judge mode; ignored otherwise).")
]


@dataclass(frozen=True)
class DisagreementQuery:
    """The query string of the disagreements page, its CSV export and its JSON twin.

    ``detectors`` holds the non-blank ``detector`` values; ``label`` is ``None`` when not
    given (see :func:`_default_label`).
    """

    detectors: list[str]
    label: str | None
    mode: str
    min_confidence: float | None
    k: int | None
    limit: int
    judge: str | None


def disagreement_query(
    detector: DetectorParam = None,
    label: LabelParam = None,
    mode: ModeParam = "threshold",
    min_confidence: ConfParam = None,
    k: KParam = None,
    limit: LimitParam = DEFAULT_LIMIT,
    judge: JudgeParam = None,
) -> DisagreementQuery:
    """The shared disagreements parameters, as one dependency."""
    return DisagreementQuery(non_blank(detector), label, mode, min_confidence, k, limit, judge)


DisagreementParams = Annotated[DisagreementQuery, Depends(disagreement_query)]


def _disagreement_list(
    session: Session, name: str, query: DisagreementQuery, label: str
) -> dict[str, Any]:
    """The service's list as a dict, against label set ``label`` (the query's, defaulted).

    ``judge`` is passed on in detector-vs-judge mode only, so a judge left in the URL does not
    break the other modes.
    """
    result = disagreements(
        session,
        name,
        query.detectors,
        label=label,
        mode=query.mode,
        min_confidence=query.min_confidence,
        k=query.k,
        limit=query.limit,
        judge=query.judge if query.mode == "detector-vs-judge" else None,
    )
    return result.as_dict()


@router.get("/benchmarks/{name}/disagreements", response_class=HTMLResponse)
def disagreements_page(
    request: Request, name: str, store: StoreDep, cache: ReadCache, query: DisagreementParams
) -> HTMLResponse:
    """Ranked confident disagreements with links to the items, and a CSV link."""
    chosen = query.detectors
    with transaction(store.factory) as session:
        facets = describe_benchmark(session, name, cache)
        label_name = default_label(facets, query.label)
        ready = chosen and (query.mode != "detector-vs-judge" or query.judge)
        result = _disagreement_list(session, name, query, label_name) if ready else None
    params = {
        "detector": chosen,
        "label": label_name,
        "mode": query.mode,
        "min_confidence": query.min_confidence,
        "k": query.k,
        "limit": query.limit if query.limit != DEFAULT_LIMIT else None,
        "judge": query.judge,
    }
    context = {
        "name": name,
        "facets": facets,
        "result": result,
        "label": label_name,
        "chosen": chosen,
        "mode": query.mode,
        "modes": MODES,
        "min_confidence": query.min_confidence,
        "k": query.k,
        "limit": query.limit,
        "judge": query.judge,
        "csv_url": disagreements_url(name, csv_export=True, **params),
    }
    return render(request, "disagreements.html", context, fragment="_disagreements_results.html")


CSV_COLUMNS = ("rank", "external_id", "label", "score", "confidence", "reason")


@router.get("/benchmarks/{name}/disagreements.csv")
def disagreements_csv(
    name: str, store: StoreDep, cache: ReadCache, query: DisagreementParams
) -> Response:
    """The same ranked list as the page, as CSV (one row per item, full-precision numbers)."""
    with transaction(store.factory) as session:
        facets = describe_benchmark(session, name, cache)
        result = _disagreement_list(session, name, query, default_label(facets, query.label))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for rank, item in enumerate(result["items"], start=1):
        writer.writerow(
            [
                rank,
                item["external_id"],
                "" if item["label"] is None else item["label"],
                "" if item["score"] is None else repr(item["score"]),
                "" if item["confidence"] is None else repr(item["confidence"]),
                item["reason"],
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


@api_router.get("/benchmarks/{name}/disagreements")
def api_disagreements(
    name: str, store: StoreDep, cache: ReadCache, query: DisagreementParams
) -> dict[str, Any]:
    """The ranked list (the dict of ``appellate disagreements --json``)."""
    with transaction(store.factory) as session:
        facets = describe_benchmark(session, name, cache)
        return _disagreement_list(session, name, query, default_label(facets, query.label))
