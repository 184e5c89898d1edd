"""Jobs pages and API on both dialects: live progress, cancel/retry, the judge form, escaping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.language_models import register_language_model
from app.services.jobs import queue as job_queue
from app.settings import Settings
from tests.support import factories as f
from tests.support.auth_support import api_client


@pytest.fixture
def client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    f.seed_benchmarks(factory)
    with transaction(factory) as s:
        register_language_model(
            s, "smol", path="/models/smol", fingerprint="sha256:x", details={"judge_mode": "forced"}
        )
    with api_client(settings) as c:
        yield c


def _job(factory: sessionmaker[Session], status: str = "queued", **params: object) -> int:
    with transaction(factory) as s:
        job = job_queue.enqueue(
            s, "judge", {"judge": "smol/forced", "benchmark": "jb-mini", **params}
        )
        if status != "queued":
            claim = job_queue.claim(s, "w", lease_seconds=60, job_id=job.id)
            assert claim is not None
            job_queue.set_progress(s, job.id, "w", 3, 8)
        if status == "failed":
            job_queue.fail(s, job.id, "w", "RuntimeError: <script>alert(1)</script>", final=True)
        return job.id


def test_jobs_page_polls_only_while_jobs_are_active(
    client: TestClient, factory: sessionmaker[Session]
):
    running = _job(factory, "running")
    page = client.get("/jobs")
    assert page.status_code == 200
    assert 'hx-trigger="every 1s"' in page.text
    assert '<progress value="3" max="8">' in page.text and f'href="/jobs/{running}"' in page.text
    assert f'action="/jobs/{running}/cancel"' in page.text
    fragment = client.get("/jobs", headers={"HX-Request": "true"})
    assert fragment.text.lstrip().startswith('<div id="jobs-table"')
    with transaction(factory) as s:
        job_queue.cancel(s, running)
    page = client.get("/jobs")
    assert "hx-trigger" not in page.text and f'action="/jobs/{running}/retry"' in page.text


def test_cancel_and_retry_from_the_page(client: TestClient, factory: sessionmaker[Session]):
    job_id = _job(factory)
    moved = client.post(f"/jobs/{job_id}/cancel", follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == f"/jobs/{job_id}"
    assert client.get(f"/api/jobs/{job_id}").json()["status"] == "cancelled"
    again = client.post(f"/jobs/{job_id}/cancel")
    assert again.status_code == 409 and "cancelled" in again.text
    htmx = client.post(f"/jobs/{job_id}/retry", headers={"HX-Request": "true"})
    assert htmx.status_code == 204 and htmx.headers["HX-Redirect"] == f"/jobs/{job_id}"
    assert client.get(f"/api/jobs/{job_id}").json()["status"] == "queued"
    assert client.post(f"/api/jobs/{job_id}/retry").status_code == 409
    assert client.get("/api/jobs/999").status_code == 404


def test_job_page_escapes_errors(client: TestClient, factory: sessionmaker[Session]):
    job_id = _job(factory, "failed", template="<img src=x onerror=alert(1)>")
    page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert "<script>alert(1)" not in page.text and "&lt;script&gt;alert(1)" in page.text
    assert "<img src=x" not in page.text
    assert "hx-trigger" not in page.text  # failed: nothing to poll


def test_judge_form_queues_a_job_with_the_model_default_mode(client: TestClient):
    form = client.get("/benchmarks/jb-mini/judge")
    assert form.status_code == 200 and 'name="template"' in form.text and "smol" in form.text
    posted = client.post(
        "/benchmarks/jb-mini/judge",
        data={"model": "smol", "orders": "AB,BA", "limit": "3", "repeat_subset": "1"},
        follow_redirects=False,
    )
    assert posted.status_code == 303
    job = client.get("/api" + posted.headers["location"]).json()
    assert job["kind"] == "judge" and job["status"] == "queued"
    params = job["params"]
    assert (params["mode"], params["judge"], params["limit"], params["repeat_subset"]) == (
        "forced",
        "smol/forced",
        3,
        1,
    )
    bad = client.post("/benchmarks/truth-mini/judge", data={"model": "smol"})
    assert bad.status_code == 422 and "pairs" in bad.text
    missing = client.post("/api/benchmarks/jb-mini/judge", json={"model": "nope"})
    assert missing.status_code == 404
    made = client.post("/api/benchmarks/jb-mini/judge", json={"model": "smol", "mode": "generate"})
    assert made.status_code == 201 and made.json()["params"]["judge"] == "smol/generate"
