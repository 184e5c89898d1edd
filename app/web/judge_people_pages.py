"""Judges against people: the section the metrics and queue pages load, and its JSON twin.

Thin routes over :mod:`app.services.review.judge_people`: each judge's Cohen's kappa, confusion
matrix and AUROC against the resolved labels of a pair-verdict label set, with intervals.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from app.db import transaction
from app.services.evidence.benchmarks import get_benchmark
from app.services.review.judge_people import people_view, queue_people_view
from app.services.review.review_views import REVIEW_RESAMPLES
from app.web.auth import Reviewer
from app.web.deps import StoreDep
from app.web.error_docs import MAX_RESAMPLES, invalid
from app.web.filters import Blank
from app.web.params import DbCount, DbId
from app.web.routers import json_router, page_router
from app.web.templating import render


class JudgeVsPeopleModel(BaseModel):
    """One judge against the people's resolved labels."""

    judge: str
    n_items: int = Field(description="Pairs with both a verdict and a resolved label.")
    n_agree: int
    agreement: float | None
    kappa: float | None = Field(description="Cohen's kappa over A, B, tie.")
    kappa_ci: list[float] | None
    kappa_reason: str | None
    confusion: list[list[int]] = Field(
        description="confusion[i][j]: pairs the judge gave values[i] and people values[j]."
    )
    auroc: float | None = Field(description="The judge's P(A is better): people's A vs B.")
    auroc_ci: list[float] | None
    auroc_reason: str | None
    auroc_n: int


class PeopleAgreementModel(BaseModel):
    """Every judge against the people on one label set."""

    label: str
    k: int
    items: int
    resamples: int
    seed: int
    judges: list[JudgeVsPeopleModel]
    values: list[str]
    level: float


class JudgesVsPeopleReport(BaseModel):
    """The judges-against-people figures of a benchmark, or why there are none (``note``)."""

    benchmark: str
    labels: list[str] = Field(description="Label sets of pair verdicts that may be compared.")
    label: str | None
    k: int
    note: str
    result: PeopleAgreementModel | None


router = page_router()
api_router = json_router("judges")

PeopleLabelParam = Annotated[
    str | None,
    Blank,
    Query(description="The people's label set (A, B, tie); default: the one with most votes."),
]
KParam = Annotated[DbCount, Query(ge=1, description="Agreeing voters that resolve a label.")]
ResamplesParam = Annotated[
    int, Query(ge=0, le=MAX_RESAMPLES, description="Group-bootstrap resamples (0: no intervals).")
]
SeedParam = Annotated[DbCount, Query(description="Bootstrap seed.")]


@router.get("/benchmarks/{name}/judges-vs-people", response_class=HTMLResponse)
def judges_vs_people_section(
    request: Request,
    name: str,
    store: StoreDep,
    label: PeopleLabelParam = None,
    k: KParam = 2,
    resamples: ResamplesParam = REVIEW_RESAMPLES,
    seed: SeedParam = 0,
) -> HTMLResponse:
    """Every judge of a benchmark against the people: the section the metrics page loads.

    A page of its own without JavaScript; htmx swaps the section into the metrics page, and
    its form (label set, k) swaps it again.
    """
    with transaction(store.factory) as session:
        bench = get_benchmark(session, name)
        view = people_view(session, bench, label, k=k, resamples=resamples, seed=seed)
    context = {"view": view, "name": name, "resamples": resamples, "seed": seed}
    return render(request, "judges_people.html", context, fragment="_judges_people.html")


@router.get("/queues/{queue_id}/judges-vs-people", response_class=HTMLResponse)
def queue_judges_vs_people(
    request: Request, queue_id: DbId, store: StoreDep, principal: Reviewer
) -> HTMLResponse:
    """Every judge against the people on a queue's items: the section the queue page loads."""
    with transaction(store.factory) as session:
        view = queue_people_view(session, queue_id, principal, resamples=REVIEW_RESAMPLES)
    context = {"view": view, "name": view.bench.name, "resamples": REVIEW_RESAMPLES, "seed": 0}
    return render(request, "judges_people.html", context, fragment="_judges_people.html")


@api_router.get(
    "/benchmarks/{name}/judges-vs-people",
    response_model=JudgesVsPeopleReport,
    responses=invalid("`k` below 1", "`resamples` above 10,000"),
)
def api_judges_vs_people(
    name: str,
    store: StoreDep,
    label: PeopleLabelParam = None,
    k: KParam = 2,
    resamples: ResamplesParam = REVIEW_RESAMPLES,
    seed: SeedParam = 0,
) -> dict[str, Any]:
    """Every judge against the people: kappa, confusion and AUROC with intervals, as JSON.

    ``result`` is null when there is nothing to compare; ``note`` says why.
    """
    with transaction(store.factory) as session:
        bench = get_benchmark(session, name)
        view = people_view(session, bench, label, k=k, resamples=resamples, seed=seed)
    return {
        "benchmark": name,
        "labels": view.labels,
        "label": view.label,
        "k": view.k,
        "note": view.note,
        "result": None if view.result is None else asdict(view.result),
    }
