"""Jobs in the browser and the API: list, live progress, cancel, retry, and the judge form."""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated, Any

from fastapi import Form, Request
from pydantic import BaseModel, Field
from starlette.responses import HTMLResponse, Response

from app.db import transaction
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.language_models import list_language_models
from app.services.jobs import queue as job_queue
from app.services.jobs.judge import JudgeParams, default_mode, enqueue_judge, judgeable_benchmarks
from app.tables import Job
from app.web.deps import StoreDep
from app.web.error_docs import CONFLICT
from app.web.job_links import job_links
from app.web.params import DbCount, DbId
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


# The judge's defaults are JudgeParams' own, so the API, the form and the CLI cannot drift apart.
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(JudgeParams)}


class JudgeRequest(BaseModel):
    """Body of ``POST /api/benchmarks/{name}/judge`` (see ``appellate judge --help``)."""

    model: str
    mode: str | None = Field(None, description="generate or forced; default: the model's.")
    judge: str = ""
    orders: list[str] = Field(default_factory=lambda: ["AB", "BA"])
    repeat_subset: DbCount = _DEFAULTS["repeat_subset"]
    limit: DbCount | None = Field(
        _DEFAULTS["limit"], description="A seeded sample of N pairs; default: every pair."
    )
    seed: DbCount = _DEFAULTS["seed"]
    max_new_tokens: DbCount = _DEFAULTS["max_new_tokens"]
    reasoning_tokens: DbCount = _DEFAULTS["reasoning_tokens"]
    batch_size: DbCount = _DEFAULTS["batch_size"]
    capture: bool = _DEFAULTS["capture"]
    verify: DbCount = _DEFAULTS["verify"]
    system: str = _DEFAULTS["system"]
    template: str = _DEFAULTS["template"]


def _queue(store: StoreDep, name: str, body: JudgeRequest) -> Job:
    with transaction(store.write_factory) as session:
        data = body.model_dump()
        if data["mode"] is None:
            data["mode"] = default_mode(session, body.model)
        return enqueue_judge(session, JudgeParams(benchmark=name, **data))


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
    context = {"job": job, "links": job_links(job)}
    return render(request, "job.html", context, fragment="_job.html")


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


@router.get("/benchmarks/{name}/judge", response_class=HTMLResponse)
def judge_form(request: Request, name: str, store: StoreDep) -> HTMLResponse:
    """The form that queues a judge job on a pairwise benchmark."""
    with transaction(store.factory) as session:
        bench = get_benchmark(session, name)
        models = [
            (m.name, (m.details or {}).get("judge_mode", "generate"))
            for m in list_language_models(session)
        ]
    context = {"bench": bench, "models": models, "defaults": JudgeRequest(model="")}
    return render(request, "judge_form.html", context)


@router.post("/benchmarks/{name}/judge")
def judge_submit(
    request: Request,
    name: str,
    store: StoreDep,
    model: Annotated[str, Form()],
    mode: Annotated[str, Form()] = "",
    orders: Annotated[str, Form()] = "AB,BA",
    repeat_subset: Annotated[DbCount, Form()] = _DEFAULTS["repeat_subset"],
    limit: Annotated[DbCount | None, Form(ge=1)] = _DEFAULTS["limit"],
    seed: Annotated[DbCount, Form()] = _DEFAULTS["seed"],
    max_new_tokens: Annotated[DbCount, Form(ge=1)] = _DEFAULTS["max_new_tokens"],
    reasoning_tokens: Annotated[DbCount, Form()] = _DEFAULTS["reasoning_tokens"],
    batch_size: Annotated[DbCount, Form(ge=1)] = _DEFAULTS["batch_size"],
    verify: Annotated[DbCount, Form()] = _DEFAULTS["verify"],
    template: Annotated[str, Form()] = _DEFAULTS["template"],
) -> Response:
    """Queue the judge job and go to its page."""
    body = JudgeRequest(
        model=model,
        mode=mode or None,
        orders=[o.strip() for o in orders.split(",") if o.strip()],
        repeat_subset=repeat_subset,
        limit=limit,
        seed=seed,
        max_new_tokens=max_new_tokens,
        reasoning_tokens=reasoning_tokens,
        batch_size=batch_size,
        verify=verify,
        template=template.replace("\r\n", "\n"),
    )
    job = _queue(store, name, body)
    return redirect_after_post(request, f"/jobs/{job.id}")


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
def api_judge(name: str, body: JudgeRequest, store: StoreDep) -> JobOut:
    """Queue a judge job on a pairwise benchmark."""
    return JobOut.of(_queue(store, name, body))
