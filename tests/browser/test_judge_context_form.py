"""The judge form with a context budget, submitted in Chromium: the job page shows the retention.

A tiny random Llama with SmolLM2's tokenizer judges three short real JudgeBench pairs, one of
them made ten times longer than the budget allows; the worker runs the queued job here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.store import Store
from tests.browser.test_pages import browser
from tests.support.auth_support import signed_in_context
from tests.support.form_support import submit_form
from tests.support.job_support import register_tiny, run_queue
from tests.support.live_server import live_server
from tests.support.short_pairs import shortest_pairs

__all__ = ["browser"]  # the shared Chromium fixture, imported so pytest finds it here

BUDGET = 1500


@pytest.fixture
def served(tmp_path: Path, tiny_model_dir: Path) -> Iterator[tuple[str, Store]]:
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'ctx.sqlite3'}")
    store = Store.open(settings)
    register_tiny(store, tiny_model_dir)
    path = shortest_pairs(tmp_path / "pairs", 3)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    rows[0]["response_B"] = " ".join([rows[0]["response_B"]] * 30)  # far over the budget
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with transaction(store.factory) as s:
        import_judgebench(s, [path], benchmark="jb")
    with live_server(settings) as url:
        yield url, store
    store.close()


@pytest.mark.browser
def test_judge_form_with_a_budget_shows_the_retention_numbers(
    browser: Any, served: tuple[str, Store]
) -> None:
    url, store = served
    context = signed_in_context(browser, url, store.settings, role="admin")
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(f"{url}/benchmarks/jb/judge")
    page.locator("select[name=mode]").select_option("forced")
    page.get_by_label("A sample of N pairs").fill("")
    page.get_by_label("Context budget (tokens)").fill(str(BUDGET))
    submit_form(page, "judge")
    page.wait_for_url(re.compile(r".*/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    expect(page.locator("#job")).to_contain_text(f"context budget {BUDGET} tokens")
    assert run_queue(store) == 1  # the worker, here
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
        assert job.status == "done", job.error
        audit = job.result["context_audit"]
    assert (audit["pairs"], audit["refused_pairs"], audit["refused_units"]) == (3, 1, 2)
    # The page polls the running job and shows the audit when it is done.
    numbers = page.locator(".context-audit .retention-numbers")
    expect(numbers).to_contain_text(f"2 of 3 pairs fit a budget of {BUDGET} tokens")
    expect(numbers).to_contain_text("(66.7% retained); 1 refused (2 judgments not made)")
    expect(page.locator(".context-audit svg.retention polyline")).to_have_count(1)
    context.close()
