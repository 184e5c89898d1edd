"""Active review in headless Chromium on real MMLU-Redux subjects, the experts as the reviewer.

A reviewer orders a queue by the learned combiner, re-ranked every 10 reviewed items, and
adjudicates 30 items, answering as the MMLU-Redux experts did (the label when they found it
fine, "question unclear" when they found a defect). The experts' labels are removed from the
store first, so the combiner learns from the review alone. After each batch a re-ranking job
runs (here, in this process, as a worker would) and the queue page shows it; the precision so
far equals a direct count of the answers given, and the found-vs-reviewed curve is drawn.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect
from sqlalchemy import delete, func, select

from app import migrate
from app.db import make_engine, session_factory, transaction
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.metrics.rankers import (
    DEFAULT_RULE,
    compute_rankers,
    rank_inputs,
    store_rankers,
)
from app.services.review import queues
from app.settings import Settings
from app.stats.proportions import wilson_interval
from app.store import Store
from app.tables import Benchmark, Instance, Job, LabelEvent, ReviewQueue, TokenKind
from tests.browser.test_pages import browser
from tests.browser.test_review import _watch
from tests.conftest import DATA
from tests.support.auth_support import PASSWORD, ensure_user, token_for
from tests.support.form_support import submit_form
from tests.support.job_support import run_queue
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]

BENCH = "redux"
SUBJECTS = ("logical_fallacies", "college_chemistry", "professional_law")
BATCH = 10


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, Settings, Store, dict[int, tuple[str, int]], int]]:
    """Three subjects ranked without verdicts, one queue of all 300 items; the experts' answers."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("browser-active"))
    engine = make_engine(settings)
    migrate.upgrade(engine)
    factory = session_factory(engine)
    with transaction(factory) as s:
        import_mmlu_redux(s, [DATA / "mmlu-redux" / f"{n}.csv" for n in SUBJECTS], BENCH)
        labels = dict(
            s.execute(
                select(LabelEvent.instance_id, LabelEvent.value).where(
                    LabelEvent.label_name == "reference"
                )
            ).all()
        )
        defects = dict(
            s.execute(
                select(LabelEvent.instance_id, LabelEvent.value).where(
                    LabelEvent.label_name == "defect"
                )
            ).all()
        )
        experts = {int(i): (str(labels[i]), int(defects[i])) for i in defects}
        # The store keeps no expert verdict: whatever is learnt comes from the review.
        s.execute(delete(LabelEvent).where(LabelEvent.label_name.in_(["defect", "errata"])))
        bench = s.scalars(select(Benchmark).where(Benchmark.name == BENCH)).one()
        ids = list(s.scalars(select(Instance.id).where(Instance.benchmark_id == bench.id)))
        queue = queues.create_queue(
            s, bench, ids, name="active", label_name="reference", source="filter",
            overlap_k=1, blind=False,
        )  # fmt: skip
        queue_id = queue.id
    with transaction(factory) as s:
        inputs = rank_inputs(s, BENCH)
    with transaction(factory) as s:
        store_rankers(s, inputs, compute_rankers(inputs))
    ensure_user(settings, "rita", "reviewer", PASSWORD)
    store = Store(settings=settings, engine=engine, factory=factory)
    with live_server(settings) as url:
        yield url, settings, store, experts, queue_id
    engine.dispose()


def _ranking(store: Store, queue_id: int) -> dict[str, Any]:
    with transaction(store.factory) as s:
        return dict(s.get_one(ReviewQueue, queue_id).ranking or {})


def test_a_reviewer_drives_an_active_queue(browser: Any, served: Any) -> None:
    url, settings, store, experts, queue_id = served
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    problems = _watch(page)
    page.goto(f"{url}/signin/{token_for(settings, 'rita', 'reviewer', TokenKind.signin)}")
    page.click("#use-link")
    page.goto(f"{url}/queues/{queue_id}")
    submit_form(page, "queue-ranking", {"ranker": "combined", "rerank_every": str(BATCH)})
    # Saving queues a first ranking: with no verdict yet, plain consensus orders the queue.
    assert run_queue(store) == 1
    first = _ranking(store, queue_id)
    assert first["at"] == 0 and first["ordered_by"] == "consensus" and "error" in first
    given: list[int] = []
    for batch in range(1, 4):
        ranking = _ranking(store, queue_id)
        for n in range(BATCH):
            page.goto(f"{url}/queues/{queue_id}/next")
            iid = int(re.search(r"/items/(\d+)$", page.url).group(1))  # type: ignore[union-attr]
            if n == 0:
                # The queue offers the top of the latest ranking first (reviewers are spread
                # over a window of the top items: next_item).
                assert iid in ranking["order"][: queues.SPREAD_WINDOW]
            label, defect = experts[iid]
            value = "question unclear" if defect else label
            submit_form(page, "queue-adjudicate", button=f"button.adjudicate[value='{value}']")
            given.append(defect)
        # The tenth adjudication queued a re-ranking on the verdicts so far.
        assert run_queue(store) == 1
        ranking = _ranking(store, queue_id)
        assert ranking["at"] == ranking["verdicts"] == BATCH * batch
        assert ranking["defects"] == sum(given)
        page.goto(f"{url}/queues/{queue_id}")
        expect(page.locator("#reranked")).to_have_attribute("data-at", str(BATCH * batch))
    assert ranking["ordered_by"] == "combined", ranking
    # The precision so far is the direct count of confirmed defects among reviewed items.
    low, high = wilson_interval(sum(given), len(given))
    precision = page.locator("#precision")
    expect(precision).to_have_attribute("data-reviewed", "30")
    expect(precision).to_have_attribute("data-defects", str(sum(given)))
    expect(precision).to_have_text(f"{sum(given) / 30:.3f} [{low:.3f}, {high:.3f}]")
    left = float(page.locator("#defects-left").inner_text())
    assert 0 < left < 270
    # The curve: this queue's order and plain consensus order on the same verdicts.
    expect(page.locator("svg.found-curve polyline.curve")).to_have_count(2)
    # The on-demand button queues one more re-ranking; its job page links back to the queue.
    submit_form(page, "queue-rerank")
    assert run_queue(store) == 1
    with store.factory() as s:
        job_id = s.scalar(select(func.max(Job.id)).where(Job.kind == "rerank_queue"))
    page.goto(f"{url}/jobs/{job_id}")
    page.get_by_role("link", name=f"Review queue {queue_id}").click()
    expect(page).to_have_url(f"{url}/queues/{queue_id}")
    # The metrics page says which ranker is the default, by which rule, and what the
    # combiner learnt from.
    page.goto(f"{url}/benchmarks/{BENCH}/metrics")
    said = page.locator("#default-ranker")
    expect(said).to_contain_text(
        f"Default label-error ranker: consensus, chosen by a {DEFAULT_RULE}"
    )
    expect(said).to_contain_text(f"trained on {BENCH}: 30 verdicts ({sum(given)} defects)")
    assert problems == []
