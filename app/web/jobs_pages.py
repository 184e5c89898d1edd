"""Jobs in the browser and the API: list, progress, cancel, retry, the judge form, and starts.

``POST /api/jobs/{kind}`` queues a job of every kind a user may start, from its parameters.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any

from fastapi import Request
from pydantic import BaseModel
from starlette.responses import HTMLResponse, Response

from app.db import transaction
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.language_models import list_language_models
from app.services.jobs import queue as job_queue
from app.services.jobs.judge import JudgeParams, judgeable_benchmarks
from app.services.jobs.kind import JobParams
from app.services.jobs.kinds import job_links, startable_kinds
from app.services.jobs.live_progress import read_live_progress
from app.store import Store
from app.tables import Job
from app.web.deps import StoreDep
from app.web.error_docs import CONFLICT
from app.web.job_forms import FormData, FormError, body_model, queue_job, submit_job_form
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


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, store: StoreDep, status: str | None = None) -> HTMLResponse:
    """Every job, newest first; the table refreshes itself while any job is active."""
    with transaction(store.factory) as session:
        rows = job_queue.list_jobs(session, status=status or None)
        active = job_queue.active_jobs_exist(session)
        pairwise = judgeable_benchmarks(session)
    context = {"jobs": rows, "active": active, "status": status or "", "pairwise": pairwise}
    return render(request, "jobs.html", context, fragment="_jobs_table.html")


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: DbId, store: StoreDep) -> HTMLResponse:
    """One job: parameters, live progress, error, result, links to its output, cancel/retry."""
    with transaction(store.factory) as session:
        job = job_queue.get_job(session, job_id)
    context = {"job": job, "links": job_links(job), "live": _live(store, job)}
    return render(request, "job.html", context, fragment="_job.html")


@dataclass(frozen=True)
class LiveProgress:
    """Progress a running job wrote beside the database (its transaction holds it)."""

    status: str
    progress_done: int
    progress_total: int | None


def _live(store: Store, job: Job) -> LiveProgress | None:
    """The running ``job``'s progress from :mod:`app.services.jobs.live_progress`, if ahead."""
    if job.status != "running":
        return None
    live = read_live_progress(store.settings.data_dir, job.id)
    if live is None or live[0] < job.progress_done:
        return None
    return LiveProgress(job.status, *live)


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
    context = {
        "bench": bench,
        "models": models,
        "values": {**defaults, **(values or {})},
        "form_error": error,
    }
    return render(request, "judge_form.html", context)


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


@api_router.post("/benchmarks/{name}/judge", response_model=JobOut, status_code=201)
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
        name=f"start_{params_type.kind}",
        summary=f"Queue a {params_type.kind} job: {params_type.title.lower()}",
        description=(params_type.__doc__ or "").strip(),
    )


for _kind in startable_kinds().values():
    _start_route(_kind)
