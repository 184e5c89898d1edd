"""Judge navigation: the judge form reached by links, submitted in Chromium, and what follows.

Also the seeded sample of pairs, a finished job's output links, and a metric page's word on
detectors with n = 0.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import expect
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.flips import recompute_flips
from app.services.evidence.language_models import register_language_model
from app.services.jobs import queue as job_queue
from app.services.jobs.judge import JudgeParams
from app.services.jobs.judge_results import UnitResult, finish_judging, plan_units, write_results
from app.services.jobs.judge_sampling import sample_pairs
from app.settings import Settings
from app.store import Store
from app.tables import Benchmark, Detector, Instance, Judgment, Score
from tests.browser.test_pages import browser
from tests.support import factories as f
from tests.support.auth_support import api_client, signed_in_context
from tests.support.form_support import submit_form
from tests.support.live_server import live_server

__all__ = ["browser"]  # the shared Chromium fixture, imported so pytest finds it here

MODEL = "smol"
NEW_JUDGE = f"{MODEL}/forced"


def _register_model(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as s:
        register_language_model(
            s, MODEL, path="/models/smol", fingerprint="sha256:x", details={"judge_mode": "forced"}
        )


def _run_judge_job(factory: sessionmaker[Session], job_id: int) -> dict[str, Any]:
    """Do what the worker does for a judge job, with a judge that always picks slot A."""
    with transaction(factory) as s:
        job = job_queue.claim(s, "w", lease_seconds=600, job_id=job_id)
        assert job is not None
        params = JudgeParams.from_dict(job.params)
        plan = plan_units(s, params, {})
        results = [
            UnitResult(u, "VERDICT: A", "A", None, None, {"A": 1.0, "B": 0.0}, 9, 2, None, {})
            for u in plan.pending
        ]
        write_results(s, plan, results, mode="forced")
        result = finish_judging(s, plan)
        assert job_queue.finish(s, job_id, "w", result)
        return result


# --- the seeded sample -------------------------------------------------------------------------


def test_the_sample_prefers_covered_pairs_is_seeded_and_extends(
    factory: sessionmaker[Session],
) -> None:
    f.seed_benchmarks(factory)
    with transaction(factory) as s:
        bench = s.scalar(select(Benchmark).where(Benchmark.name == f.PAIRWISE))
        assert bench is not None
        new = Detector(name="new", kind="judge")
        s.add(new)
        s.flush()
        ids: dict[str, int] = dict(s.execute(select(Instance.external_id, Instance.id)).all())
        # Coverage by other detectors: pair/001 by 4, 002/004/005 by 3, 003 by 2, q?x by none.
        everything = sample_pairs(s, bench.id, new.id, 10, seed=0)
        assert everything[0] == ids["pair/001:a|b"] and everything[-1] == ids["q?x#y%z"]
        assert set(everything[1:4]) == {ids["pair/002"], ids["pair-004"], ids["pair-005"]}
        orders = {tuple(sample_pairs(s, bench.id, new.id, 6, seed)) for seed in range(8)}
        assert len(orders) > 1  # the seed orders pairs of equal coverage
        for seed in range(4):
            small = sample_pairs(s, bench.id, new.id, 2, seed)
            assert small == sample_pairs(s, bench.id, new.id, 2, seed)  # reproducible
            assert sample_pairs(s, bench.id, new.id, 4, seed)[:2] == small  # N + k holds N
        # The judge's own judgments and scores are not coverage (a resumed job re-plans alike).
        before = sample_pairs(s, bench.id, new.id, 3, seed=1)
        q = ids["q?x#y%z"]
        s.add(Score(detector_id=new.id, instance_id=q, score=0.5, details={}))
        s.add(Judgment(instance_id=q, detector_id=new.id, order="AB", choice="A"))
        s.flush()
        assert sample_pairs(s, bench.id, new.id, 3, seed=1) == before


# --- the metric page of a judge with few pairs -------------------------------------------------


@pytest.fixture
def client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    f.seed_benchmarks(factory)
    with api_client(settings) as c:
        yield c


def test_detectors_with_n_0_say_why_and_no_empty_plots(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    # A new judge that judged only the pair no reward model scored.
    with transaction(factory) as s:
        bench = s.scalar(select(Benchmark).where(Benchmark.name == f.PAIRWISE))
        assert bench is not None
        new = Detector(name="new", kind="judge")
        s.add(new)
        s.flush()
        q = s.scalar(select(Instance.id).where(Instance.external_id == "q?x#y%z"))
        for order in ("AB", "BA"):
            s.add(Judgment(instance_id=q, detector_id=new.id, order=order, choice="A"))
        s.flush()
        recompute_flips(s, bench.id, [new.id])
    r = client.get(f"/benchmarks/{f.PAIRWISE}/metrics?label=flip:new&resamples=200")
    assert r.status_code == 200
    for rm in (f.RM_1, f.RM_2):
        row = re.search(rf'data-detector="{re.escape(rm)}">(.*?)</tr>', r.text, re.S)
        assert row is not None
        assert "No score on any item labelled in flip:new" in html.unescape(row.group(1))
        assert 'class="num undefined"' not in row.group(1)  # a reason, not a row of dashes
    assert "<h2>Plots</h2>" in r.text  # the judge itself scored its pair
    only_rm = client.get(
        f"/benchmarks/{f.PAIRWISE}/metrics?label=flip:new&detector={f.RM_1}&resamples=200"
    )
    assert only_rm.status_code == 200
    assert "<h2>Plots</h2>" not in only_rm.text
    assert "No plots: no detector scored an item labelled in flip:new" in only_rm.text


# --- Chromium: from the benchmark page to the judge form, and from the job to its output -------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'nav.sqlite3'}")
    store = Store.open(settings)
    f.seed_benchmarks(store.factory)
    _register_model(store.factory)
    with live_server(settings) as url:
        yield url, store
    store.close()


@pytest.mark.browser
def test_judge_form_from_the_benchmark_page_to_the_job_and_its_output(
    browser: Any, served: tuple[str, Store]
) -> None:
    url, store = served
    context = signed_in_context(browser, url, store.settings, role="admin")
    page = context.new_page()
    page.set_default_timeout(10_000)

    # The Jobs page links to the judge form of each pairwise benchmark.
    page.goto(f"{url}/jobs")
    expect(page.locator("a.judge-link")).to_have_count(1)
    assert page.locator("a.judge-link").get_attribute("href") == f"/benchmarks/{f.PAIRWISE}/judge"

    page.goto(f"{url}/benchmarks/{f.PAIRWISE}")
    page.get_by_role("link", name="Judge", exact=True).click()
    page.wait_for_url(f"{url}/benchmarks/{f.PAIRWISE}/judge")
    expect(page.get_by_label("A sample of N pairs")).to_be_visible()
    page.get_by_label("A sample of N pairs").fill("2")
    page.get_by_label("Seed").fill("3")
    submit_form(page, "judge")
    page.wait_for_url(re.compile(r".*/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    expect(page.locator("#job")).to_contain_text("a sample of 2 pairs (seed 3)")
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
        assert (job.kind, job.params["limit"], job.params["seed"]) == ("judge", 2, 3)
        assert job.params["judge"] == NEW_JUDGE and job.params["mode"] == "forced"

    # The worker finishes it: the page stops polling and links to what the job produced.
    result = _run_judge_job(store.factory, job_id)
    assert result["retained_pairs"] == 2 and result["flips"] == 2 and result["scored_pairs"] == 2
    expect(page.locator("#job .job-output")).to_be_visible()
    page.get_by_role("link", name=f"Metrics of flip:{NEW_JUDGE}").click()
    page.wait_for_url(re.compile(r".*/metrics\?label=flip%3Asmol%2Fforced$"))
    expect(page.locator("table.metric-matrix")).to_contain_text(f.RM_1)
    # The sample preferred pairs the reward models scored: neither has n = 0 here.
    assert page.get_by_text("No score on any item labelled").count() == 0

    page.go_back()
    page.get_by_role("link", name="The pairs it scored (instance table)").click()
    page.wait_for_url(re.compile(r".*/benchmarks/jb-mini\?score_detector=smol%2Fforced.*"))
    expect(page.locator("#results")).to_contain_text("pair/001:a|b")

    page.go_back()
    page.get_by_role("link", name="Its score beside the other detectors (metric matrix)").click()
    expect(page.locator(f'table.metric-matrix tr[data-detector="{NEW_JUDGE}"]')).to_have_count(1)
    context.close()
