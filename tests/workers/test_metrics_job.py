"""Big benchmarks: a missing metrics result is computed by a ``compute_metrics`` job.

The page queues the job (once), shows its progress and polls; meanwhile it shows the previous
data version's numbers marked stale. The inline limit is set to 0 so that the bundled
JudgeBench data counts as big.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.services.evidence.benchmarks import bump_data_version, get_benchmark
from app.services.jobs.compute_metrics import ComputeMetricsParams
from app.services.metrics import metric_results
from app.services.metrics.metric_results import MetricsResult
from app.services.metrics.metrics_query import METRICS_CACHE, MetricsQuery
from app.settings import Settings
from app.tables import Job
from tests.ingest.test_helpers import O1_MINI, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.metrics.test_metric_results import _direct, assert_close
from tests.support.auth_support import api_client
from tests.support.job_support import run_queue, store_on
from tests.support.metric_results_support import count_computations

R = 200
PAGE = f"/benchmarks/judgebench/metrics?resamples={R}"
HX = {"HX-Request": "true"}


@pytest.fixture
def big(settings: Settings) -> Settings:
    return settings.model_copy(update={"metrics_inline_items": 0})


@pytest.fixture
def client(big: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    with transaction(factory) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])
    METRICS_CACHE.clear()
    with api_client(big) as c:
        yield c


@pytest.fixture
def in_request(monkeypatch: pytest.MonkeyPatch) -> list[MetricsQuery]:
    """Queries computed by the web process (the job's own computation is not counted)."""
    return count_computations(monkeypatch, skip_workers=True)


def _jobs(factory: sessionmaker[Session]) -> list[Job]:
    with factory() as session:
        return list(session.scalars(select(Job).where(Job.kind == ComputeMetricsParams.kind)))


def _notice(page: str) -> str | None:
    found = re.search(r'<p class="notice metrics-pending"[^>]*>(.*?)</p>', page, re.S)
    return None if found is None else html.unescape(re.sub(r"<[^>]+>", " ", found.group(1)))


def _matrix(page: str) -> str:
    found = re.search(r'<table class="grid metric-matrix">.*?</table>', page, re.S)
    assert found is not None
    return found.group(0)


def _polls(page: str) -> bool:
    return re.search(r'<section id="results"[^>]*hx-trigger="load delay:2s"', page) is not None


def test_a_big_benchmark_is_computed_by_a_job_and_stale_numbers_shown_meanwhile(
    big: Settings,
    engine: Engine,
    factory: sessionmaker[Session],
    client: TestClient,
    in_request: list[MetricsQuery],
) -> None:
    first = client.get(PAGE)
    assert first.status_code == 200
    notice = _notice(first.text)
    assert notice is not None and "Computing…" in notice and "Stale" not in notice
    assert _polls(first.text) and "metric-matrix" not in first.text
    (job,) = _jobs(factory)
    assert job.status == "queued" and f"job {job.id}" in notice
    assert job.params["query"]["resamples"] == R
    # Polling (an htmx request) finds the same job: none is queued twice.
    polled = client.get(PAGE, headers=HX)
    assert polled.status_code == 200 and polled.text.lstrip().startswith("<section")
    assert len(_jobs(factory)) == 1 and _polls(polled.text)
    assert in_request == []

    assert run_queue(store_on(big, engine)) == 1
    (job,) = _jobs(factory)
    assert job.status == "done", job.error
    assert job.result is not None and job.result["computed"] is True
    assert job.progress_total is not None and job.progress_total >= 3
    assert job.progress_done == job.progress_total

    done = client.get(PAGE)
    assert _notice(done.text) is None and not _polls(done.text)
    assert "<svg" in done.text and in_request == []  # read, not computed, in the request
    api = client.get(f"/api/benchmarks/judgebench/metrics?resamples={R}")
    assert_close(api.json(), _direct(factory))
    assert in_request == []
    before = _matrix(done.text)

    # New data: the old numbers are shown, marked stale, while a new job recomputes.
    with transaction(factory) as session:
        bump_data_version(session, get_benchmark(session, "judgebench"))
    stale = client.get(PAGE)
    notice = _notice(stale.text)
    assert notice is not None and "Stale — recomputing" in notice
    assert _polls(stale.text) and _matrix(stale.text) == before
    jobs = _jobs(factory)
    assert len(jobs) == 2 and f"job {max(j.id for j in jobs)}" in notice
    assert run_queue(store_on(big, engine)) == 1
    fresh = client.get(PAGE)
    assert _notice(fresh.text) is None and _matrix(fresh.text) == before
    assert in_request == []


def test_a_job_finds_a_result_already_stored_and_computes_nothing(
    big: Settings, engine: Engine, factory: sessionmaker[Session], client: TestClient
) -> None:
    client.get(PAGE)  # queues the job
    query = MetricsQuery("judgebench", resamples=R)
    with factory() as session:
        result = metric_results.compute_result(session, query)
    with transaction(factory) as session:
        metric_results.save_result(session, result)
    run_queue(store_on(big, engine))
    (job,) = _jobs(factory)
    assert job.status == "done" and job.result == {"benchmark": "judgebench", "computed": False}


def test_a_failed_job_is_shown_and_not_queued_again(
    big: Settings,
    engine: Engine,
    factory: sessionmaker[Session],
    client: TestClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client.get(PAGE)

    def broken(*args: Any, **kwargs: Any) -> MetricsResult:
        raise RuntimeError("out of memory")

    monkeypatch.setattr(metric_results, "compute_result", broken)
    job_id = _jobs(factory)[0].id
    for _ in range(3):  # every attempt
        run_queue(store_on(big, engine))
    page = client.get(PAGE)
    notice = _notice(page.text)
    assert notice is not None and "failed" in notice and "out of memory" in notice
    assert not _polls(page.text)
    assert [j.id for j in _jobs(factory)] == [job_id]


@pytest.mark.parametrize(
    "query",
    ["&detector=no-such-detector", "&slice=bad%20field", "&label=no-such-set"],
)
def test_a_bad_request_is_refused_at_once_and_queues_nothing(
    client: TestClient, factory: sessionmaker[Session], query: str
) -> None:
    page = client.get(PAGE + query)
    assert 400 <= page.status_code < 500
    assert _jobs(factory) == []
