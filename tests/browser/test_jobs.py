"""Headless Chromium: a job's page follows its progress live (htmx polling) and its buttons work."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from sqlalchemy import update

from app.db import transaction
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.store import Store
from app.tables import Job, utcnow
from app.web.jobs_pages import JUDGE_FORM_SAMPLE
from tests.browser.test_pages import browser
from tests.support import factories as f
from tests.support.auth_support import signed_in_context
from tests.support.form_support import submit_form
from tests.support.job_targets import CHOICE, MODEL, seed_job_targets
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]  # the shared Chromium fixture, imported so pytest finds it here


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'jobs.sqlite3'}")
    store = Store.open(settings)
    with live_server(settings) as url:
        yield url, store
    store.close()


def test_progress_bar_follows_the_worker_and_cancel_stops_the_job(
    browser: Any, served: tuple[str, Store]
):
    url, store = served
    with transaction(store.factory) as s:
        job_id = job_queue.enqueue(s, "judge", {"judge": "m/forced", "benchmark": "b"}).id
        assert job_queue.claim(s, "w", lease_seconds=600, job_id=job_id) is not None
        job_queue.set_progress(s, job_id, "w", 1, 10)
    context = signed_in_context(browser, url, store.settings)
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.goto(f"{url}/jobs/{job_id}")
    bar = page.locator("#job progress")
    assert bar.get_attribute("value") == "1"
    with transaction(store.factory) as s:  # the worker reports a batch
        job_queue.set_progress(s, job_id, "w", 7, 10)
    # The page's CSP forbids eval, so wait with a locator assertion, not wait_for_function.
    expect(page.locator("#job progress")).to_have_attribute("value", "7")
    submit_form(page, "job-cancel")
    page.wait_for_selector("text=cancelled")
    assert page.locator("#job[hx-trigger]").count() == 0  # a finished job stops polling
    assert page.get_by_role("button", name="Retry").is_visible()
    with transaction(store.factory) as s:
        assert job_queue.get_job(s, job_id).status == "cancelled"
        assert not job_queue.heartbeat(s, job_id, "w", lease_seconds=60)  # the worker is told
    context.close()


def test_rank_errors_and_answer_start_from_the_jobs_page_with_eta(
    browser: Any, served: tuple[str, Store], tmp_path: Path
) -> None:
    """Issue 21 item 10: the kinds that were CLI-only start from the generic form."""
    url, store = served
    seed_job_targets(store.factory, tmp_path)
    context = signed_in_context(browser, url, store.settings, role="admin")
    page = context.new_page()
    page.set_default_timeout(10_000)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(f"{url}/jobs")
    page.get_by_role("link", name="Rank label errors").click()
    expect(page).to_have_url(f"{url}/jobs/new/rank_errors")
    # An unknown ranker comes back with the reason beside the field, and queues nothing.
    submit_form(page, "job-start", {"benchmark": CHOICE, "rankers": "psychic"}, refused=422)
    expect(page.locator("#error-job-start-rankers")).to_contain_text("consensus")
    submit_form(page, "job-start", {"benchmark": CHOICE, "rankers": "consensus"})
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    expect(page.locator("#job")).to_contain_text(f"Rank label errors of {CHOICE} (consensus")
    # A worker has done a quarter in 100 s: the live page shows the time and what is left.
    with transaction(store.factory) as s:
        assert job_queue.claim(s, "w", lease_seconds=600, job_id=job_id) is not None
        job_queue.set_progress(s, job_id, "w", 25, 100)
        s.execute(
            update(Job).where(Job.id == job_id).values(started_at=utcnow() - timedelta(seconds=100))
        )
    expect(page.locator("#job .job-timing")).to_contain_text(
        re.compile(r"elapsed 1 min 4\d s, about 5 min")
    )
    # The answer job, from the choice benchmark's page, without capture.
    page.goto(f"{url}/benchmarks/{CHOICE}")
    page.get_by_role("link", name="Answer with a model").click()
    # A cleared box leaves only its hidden "false" (it sits beside a hidden input of its name).
    page.get_by_role("checkbox", name="Capture").uncheck()
    submit_form(page, "job-start", {"model": MODEL, "limit": "2"})
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"))
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, int(page.url.rsplit("/", 1)[1]))
        assert job.kind == "answer_choices"
        assert (job.params["benchmark"], job.params["limit"], job.params["capture"]) == (
            CHOICE,
            2,
            False,
        )
    # The judge form: a small sample by default, and no estimate before any judge job.
    page.goto(f"{url}/benchmarks/{f.PAIRWISE}/judge")
    expect(page.locator('input[name="limit"]')).to_have_value(str(JUDGE_FORM_SAMPLE))
    expect(page.locator(".judge-estimate")).to_contain_text(f"{MODEL}: no estimate yet")
    context.close()
    assert problems == []


def test_critic_starts_from_the_jobs_page_with_a_small_sample(
    browser: Any, served: tuple[str, Store], tmp_path: Path
) -> None:
    """Issue 23 item 5: the LLM critic starts from the generic form; a bad mode is refused."""
    url, store = served
    seed_job_targets(store.factory, tmp_path)
    context = signed_in_context(browser, url, store.settings, role="admin")
    page = context.new_page()
    page.set_default_timeout(10_000)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(f"{url}/jobs")
    page.get_by_role("link", name="Critic", exact=True).click()
    expect(page).to_have_url(f"{url}/jobs/new/critic")
    fields = {"benchmark": CHOICE, "model": MODEL, "limit": "2"}
    submit_form(page, "job-start", {**fields, "mode": "calibrated"}, refused=422)
    expect(page.locator("#error-job-start-mode")).to_contain_text("generate, forced")
    # No mode: the registered model's own (forced for this one).
    submit_form(page, "job-start", {**fields, "mode": ""})
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"))
    expect(page.locator("#job")).to_contain_text(
        f"Critic {MODEL} (forced) checks {CHOICE}'s labels as critic:{MODEL}, a sample of 2 items"
    )
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, int(page.url.rsplit("/", 1)[1]))
    assert job.kind == "critic" and job.status == "queued"
    assert (job.params["benchmark"], job.params["limit"], job.params["mode"]) == (
        CHOICE,
        2,
        "forced",
    )
    context.close()
    assert problems == []
