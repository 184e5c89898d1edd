"""Jobs in the browser and the API: list, progress, cancel, retry, the judge form, and starts.

``POST /api/jobs/{kind}`` queues a job of every kind a user may start, from its parameters;
``/jobs/new/{kind}`` is the same start as a form, built from the kind's parameter fields.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from datetime import datetime
from typing import Annotated, Any

from fastapi import Query, Request
from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starlette.responses import HTMLResponse, Response

from app.db import transaction
from app.errors import InvalidInput, NotFound
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.language_models import list_language_models
from app.services.jobs import queue as job_queue
from app.services.jobs.judge import JudgeParams, judgeable_benchmarks
from app.services.jobs.judge_context import retention_plot
from app.services.jobs.kind import JobParams
from app.services.jobs.kinds import job_links, startable_kinds
from app.services.jobs.live_progress import read_live_progress
from app.services.jobs.timing import duration_text, judge_throughput, judge_units
from app.store import Store
from app.tables import Benchmark, Instance, Job
from app.web.deps import StoreDep
from app.web.error_docs import BAD_BODY, CONFLICT, invalid
from app.web.job_forms import (
    FormData,
    FormError,
    body_model,
    form_fields,
    form_settable,
    queue_job,
    submit_job_form,
)
from app.web.params import DbId
from app.web.responses import redirect_after_post
from app.web.routers import json_router, page_router
from app.web.templating import render

router = page_router()
api_router = json_router("jobs")


class JobOut(BaseModel):
    """A job as the API returns it."""

    id: int
    kind: str
    status: str
    progress_done: int
    progress_total: int | None
    # The job's own times: the progress macro shows elapsed time and an ETA from them.
    started_at: datetime | None
    finished_at: datetime | None
    attempts: int
    max_attempts: int
    params: dict[str, Any]
    error: str | None
    result: dict[str, Any] | None

    @classmethod
    def of(cls, job: Job) -> JobOut:
        """From a row."""
        return cls.model_validate(job, from_attributes=True)


# The judge's fields and defaults are JudgeParams' own, so the API, the form and the CLI cannot
# drift apart; an omitted mode is the registered model's.
JudgeBody = body_model(JudgeParams, exclude=frozenset({"benchmark"}))
JUDGE_FORM = "judge"
# The judge form's sample: small enough that a first run on a CPU finishes in minutes (the
# parameters' own default, every pair, is one blank field away).
JUDGE_FORM_SAMPLE = 20
START_FORM = "job-start"
# Kinds with a form of their own elsewhere: the jobs page links there, not to the generic form.
_OWN_FORMS = {"judge": "the Judge form of a pairwise benchmark (below)", "fit_lie_probe": "/probes"}


def startable_forms() -> list[tuple[str, str, str | None]]:
    """Every kind a user may start: (kind, title, URL of its generic form or None)."""
    return [
        (name, cls.title, f"/jobs/new/{name}" if name not in _OWN_FORMS and form_settable(cls)
         else None)
        for name, cls in sorted(startable_kinds().items())
    ]  # fmt: skip


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, store: StoreDep, status: str | None = None) -> HTMLResponse:
    """Every job, newest first; the table refreshes itself while any job is active."""
    with transaction(store.factory) as session:
        rows = job_queue.list_jobs(session, status=status or None)
        active = job_queue.active_jobs_exist(session)
        pairwise = judgeable_benchmarks(session)
    context = {
        "jobs": rows,
        "active": active,
        "status": status or "",
        "pairwise": pairwise,
        "starts": startable_forms(),
    }
    return render(request, "jobs.html", context, fragment="_jobs_table.html")


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: DbId, store: StoreDep) -> HTMLResponse:
    """One job: parameters, live progress, error, result, links to its output, cancel/retry."""
    with transaction(store.factory) as session:
        job = job_queue.get_job(session, job_id)
    context = {"job": job, "links": job_links(job), "live": _live(store, job)}
    audit = (job.result or {}).get("context_audit")
    if isinstance(audit, dict):
        context["context_audit"] = audit
        context["retention_plot"] = retention_plot(audit)
    return render(request, "job.html", context, fragment="_job.html")


@dataclass(frozen=True)
class LiveProgress:
    """Progress a running job wrote beside the database (its transaction holds it)."""

    status: str
    progress_done: int
    progress_total: int | None
    # The job's own times: the progress macro shows elapsed time and an ETA from them.
    started_at: datetime | None
    finished_at: datetime | None


def _live(store: Store, job: Job) -> LiveProgress | None:
    """The running ``job``'s progress from :mod:`app.services.jobs.live_progress`, if ahead."""
    if job.status != "running":
        return None
    live = read_live_progress(store.settings.data_dir, job.id)
    if live is None or live[0] < job.progress_done:
        return None
    return LiveProgress(job.status, *live, started_at=job.started_at, finished_at=job.finished_at)


@router.post("/jobs/{job_id}/cancel")
def cancel_job(request: Request, job_id: DbId, store: StoreDep) -> Response:
    """Cancel a queued or running job (a running worker stops after its current batch)."""
    with transaction(store.write_factory) as session:
        job_queue.cancel(session, job_id)
    return redirect_after_post(request, f"/jobs/{job_id}")


@router.post("/jobs/{job_id}/retry")
def retry_job(request: Request, job_id: DbId, store: StoreDep) -> Response:
    """Queue a failed or cancelled job again; the units it finished are kept."""
    with transaction(store.write_factory) as session:
        job_queue.retry(session, job_id)
    return redirect_after_post(request, f"/jobs/{job_id}")


def _judge_page(
    request: Request,
    store: StoreDep,
    name: str,
    values: dict[str, str] | None = None,
    error: FormError | None = None,
) -> HTMLResponse:
    with transaction(store.factory) as session:
        bench = get_benchmark(session, name)
        models = [
            (m.name, (m.details or {}).get("judge_mode", "generate"))
            for m in list_language_models(session)
        ]
        defaults = {f.name: f.default for f in fields(JudgeParams) if f.default is not MISSING}
        shown = {**defaults, "limit": JUDGE_FORM_SAMPLE, **(values or {})}
        pairs = session.scalar(
            select(func.count()).select_from(Instance).where(Instance.benchmark_id == bench.id)
        )
        estimates = [
            (model, _judge_estimate(session, model, shown, pairs or 0)) for model, _ in models
        ]
    context = {
        "bench": bench,
        "models": models,
        "values": shown,
        "estimates": estimates,
        "form_error": error,
    }
    return render(request, "judge_form.html", context)


def _judge_estimate(session: Session, model: str, values: dict[str, Any], pairs: int) -> str:
    """How long the sample shown takes with ``model``, from its recent judge jobs' pace."""
    rate = judge_throughput(session, model)
    if rate is None:
        return "no estimate yet (it has finished no judge job)"
    try:
        limit = JudgeParams.parse_form({"limit": str(values.get("limit") or "")})["limit"]
        repeats = JudgeParams.parse_form({"repeat_subset": str(values.get("repeat_subset", 0))})
    except InvalidInput:
        return "no estimate for these values"
    orders = values.get("orders") or ["AB", "BA"]
    n_orders = len(orders.split(",") if isinstance(orders, str) else orders)
    units = judge_units(limit, n_orders, repeats["repeat_subset"], pairs)
    jobs = f"{rate.jobs} judge job{'s' if rate.jobs != 1 else ''}"
    return (
        f"about {duration_text(rate.estimate(units))} for {units:,} judgments "
        f"({rate.per_second:.2g} a second over its last {jobs})"
    )


@router.get("/benchmarks/{name}/judge", response_class=HTMLResponse)
def judge_form(request: Request, name: str, store: StoreDep) -> HTMLResponse:
    """The form that queues a judge job on a pairwise benchmark."""
    return _judge_page(request, store, name)


@router.post("/benchmarks/{name}/judge")
def judge_submit(request: Request, name: str, store: StoreDep, form: FormData) -> Response:
    """Queue the judge job and go to its page; a bad value shows the form again, marked."""
    return submit_job_form(
        request,
        store,
        JUDGE_FORM,
        JudgeParams,
        lambda: {**JudgeParams.parse_form(form), "benchmark": name},
        lambda error: _judge_page(request, store, name, form, error),
    )


def _start_kind(kind: str) -> type[JobParams]:
    """The parameters class of a kind users start from the generic form (else 404)."""
    cls = startable_kinds().get(kind)
    if cls is None or kind in _OWN_FORMS or not form_settable(cls):
        raise NotFound(f"no job kind {kind!r} to start here")
    return cls


def _start_page(
    request: Request,
    store: StoreDep,
    kind: str,
    values: dict[str, str] | None = None,
    error: FormError | None = None,
) -> HTMLResponse:
    params_type = _start_kind(kind)
    with transaction(store.factory) as session:
        choices = {
            "benchmark": tuple(session.scalars(select(Benchmark.name).order_by(Benchmark.name))),
            "model": tuple(m.name for m in list_language_models(session)),
        }
    context = {
        "kind": kind,
        "params_type": params_type,
        "doc": (params_type.__doc__ or "").strip(),
        "fields": form_fields(params_type, values or {}, choices),
        "form_error": error,
    }
    return render(request, "job_form.html", context)


@router.get("/jobs/new/{kind}", response_class=HTMLResponse)
def start_form(
    request: Request,
    kind: str,
    store: StoreDep,
    benchmark: str | None = None,
    judge: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    """The form that starts a job of ``kind``: one control per parameter, with its default.

    ``benchmark`` and ``judge`` fill in those fields (links from a benchmark's or a judge's page).
    """
    given = {"benchmark": benchmark, "judge": judge}
    return _start_page(request, store, kind, {k: v for k, v in given.items() if v} or None)


@router.post("/jobs/new/{kind}")
def start_submit(request: Request, kind: str, store: StoreDep, form: FormData) -> Response:
    """Queue the job and go to its page; a bad value shows the form again, marked (422)."""
    params_type = _start_kind(kind)
    return submit_job_form(
        request,
        store,
        START_FORM,
        params_type,
        lambda: params_type.parse_form(form),
        lambda error: _start_page(request, store, kind, form, error),
    )


@api_router.get("/jobs", response_model=list[JobOut])
def api_jobs(store: StoreDep, status: str | None = None) -> list[JobOut]:
    """The newest 200 jobs, optionally of one status."""
    with transaction(store.factory) as session:
        return [JobOut.of(j) for j in job_queue.list_jobs(session, status=status)]


@api_router.get("/jobs/{job_id}", response_model=JobOut)
def api_job(job_id: DbId, store: StoreDep) -> JobOut:
    """One job with its progress, error and result."""
    with transaction(store.factory) as session:
        return JobOut.of(job_queue.get_job(session, job_id))


@api_router.post("/jobs/{job_id}/cancel", response_model=JobOut, responses=CONFLICT)
def api_cancel(job_id: DbId, store: StoreDep) -> JobOut:
    """Cancel a queued or running job (409 if it already finished)."""
    with transaction(store.write_factory) as session:
        return JobOut.of(job_queue.cancel(session, job_id))


@api_router.post("/jobs/{job_id}/retry", response_model=JobOut, responses=CONFLICT)
def api_retry(job_id: DbId, store: StoreDep) -> JobOut:
    """Queue a failed or cancelled job again (409 otherwise)."""
    with transaction(store.write_factory) as session:
        return JobOut.of(job_queue.retry(session, job_id))


# What the kinds' own checks refuse, beyond the types of their fields.
JOB_INVALID = invalid(
    "a value the kind's parameters refuse (a count out of range, an unknown mode, ranker or "
    "placeholder)",
    "a benchmark of a kind the job cannot run on (a judge needs pairs)",
)


@api_router.post(
    "/benchmarks/{name}/judge",
    response_model=JobOut,
    status_code=201,
    responses={**JOB_INVALID, **BAD_BODY},
)
def api_judge(name: str, body: JudgeBody, store: StoreDep) -> JobOut:  # type: ignore[valid-type]
    """Queue a judge job on a pairwise benchmark (an omitted mode is the model's default)."""
    data = {**body.model_dump(exclude_unset=True), "benchmark": name}  # type: ignore[attr-defined]
    return JobOut.of(queue_job(store, JudgeParams, data))


def _start_route(params_type: type[JobParams]) -> None:
    """``POST /api/jobs/{kind}``: queue a job of ``params_type`` from its JSON parameters."""
    body_type = body_model(params_type)

    def start(body: Any, store: StoreDep) -> JobOut:
        return JobOut.of(queue_job(store, params_type, body.model_dump(exclude_unset=True)))

    # The body's type is built here, so it is set on the function rather than written in it.
    start.__annotations__ = {"body": body_type, "store": StoreDep, "return": JobOut}
    api_router.add_api_route(
        f"/jobs/{params_type.kind}",
        start,
        methods=["POST"],
        response_model=JobOut,
        status_code=201,
        responses={**JOB_INVALID, **BAD_BODY},
        name=f"start_{params_type.kind}",
        summary=f"Queue a {params_type.kind} job: {params_type.title.lower()}",
        description=(params_type.__doc__ or "").strip(),
    )


for _kind in startable_kinds().values():
    _start_route(_kind)
