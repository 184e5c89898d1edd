"""Judges against people in headless Chromium: a queue of the judge's splits, then the metrics page.

A reviewer builds a queue from the source "the judge disagrees with the people" through the
new-queue form; the queue page loads the judges' figures on its items. On the metrics page the
section loads after the page; choosing k in its form swaps it, and the figures shown are the
service's for that k.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from app.db import transaction
from app.ingest.mtbench_human import import_mtbench_human
from app.ingest.mtbench_judgments import import_mtbench_judgments
from app.services.evidence.benchmarks import get_benchmark
from app.services.review import queues
from app.services.review.judge_people import judges_vs_people
from app.settings import Settings
from app.store import Store
from app.tables import ReviewQueue
from app.web.templating import fmt_number
from tests.browser.test_pages import browser
from tests.ingest.test_helpers import FORMATS
from tests.support.auth_support import signed_in_context
from tests.support.form_support import submit_form
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]  # the shared Chromium fixture, imported so pytest finds it here

TURBO = "fastchat_pair/gpt-4-turbo"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings, Store]]:
    """A server on its own SQLite store: FastChat's judges and the people's votes on MT-Bench."""
    tmp = tmp_path_factory.mktemp("browser-people")
    settings = Settings(data_dir=tmp, database_url=f"sqlite:///{tmp / 'people.sqlite3'}")
    store = Store.open(settings)
    with transaction(store.factory) as session:
        judgments = sorted((FORMATS / "mt_bench" / "model_judgment").glob("*_pair.jsonl"))
        import_mtbench_judgments(session, judgments)
        import_mtbench_human(session, [FORMATS / "mt_bench_human" / "human_judgments.jsonl"])
    with live_server(settings) as url:
        yield url, settings, store
    store.close()


def test_queue_and_metrics_pages_show_judges_against_people(
    browser: object, served: tuple[str, Settings, Store]
) -> None:
    url, settings, store = served
    context = signed_in_context(browser, url, settings, viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{url}/benchmarks/mt-bench/queues/new?source=judge-people")
    fields = {
        "name": "turbo against people",
        "source": "judge-people",
        "query": f"judge={TURBO}&label=human&k=1",
        "label": "human",
        "overlap_k": "1",
    }
    submit_form(page, "queue-new", fields)
    expect(page.locator("h1")).to_contain_text("turbo against people")
    with store.factory() as session:
        queue = session.scalar(select(ReviewQueue).where(ReviewQueue.name == fields["name"]))
        assert queue is not None
        n_items = len(queues.item_ids(session, queue))
    assert n_items > 0
    row = page.locator(f'#judges-people tr[data-judge="{TURBO}"]')
    # Every item of the queue is one the judge and the people split on: n items, no agreement.
    expect(row.locator("td.n-items")).to_have_text(str(n_items))
    expect(row.locator("td.agreement")).to_have_text(fmt_number(0.0))

    page.goto(f"{url}/benchmarks/mt-bench/metrics")
    section = page.locator("section#judges-people")
    expect(section.locator("table.judges-people-table")).to_be_visible()
    submit_form(page, "judges-people", {"label": "human", "k": "1"})
    with store.factory() as session:
        bench = get_benchmark(session, "mt-bench")
        want = {
            r.judge: r for r in judges_vs_people(session, bench, "human", k=1, resamples=500).judges
        }
    assert want[TURBO].kappa is not None
    for judge, expected in want.items():
        cells = page.locator(f'#judges-people tr[data-judge="{judge}"]')
        expect(cells.locator("td.n-items")).to_have_text(str(expected.n_items))
        expect(cells.locator("td.kappa")).to_contain_text(fmt_number(expected.kappa))
    expect(page.locator("#judges-people h2")).to_contain_text("resolved with k = 1")
    context.close()
