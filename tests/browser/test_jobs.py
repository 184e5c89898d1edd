"""Headless Chromium: a job's page follows its progress live (htmx polling) and its buttons work."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from app.db import transaction
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.store import Store
from tests.browser.test_pages import browser
from tests.support.auth_support import signed_in_context
from tests.support.form_support import submit_form
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
