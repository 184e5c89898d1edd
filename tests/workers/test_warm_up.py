"""The ``warm_up`` job keeps a benchmark's headline metrics, so its metrics page is served.

With the inline limit at 0 every benchmark counts as big: without the job the first visit
queues a ``compute_metrics`` job; after it the page answers with the kept figures at once.
Both databases.
"""

from __future__ import annotations

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.benchmarks import get_benchmark
from app.services.jobs.kind import create, enqueue
from app.services.jobs.warm_up import WarmUpParams
from app.services.metrics.metric_results import stored_result
from app.settings import Settings
from app.tables import Job
from tests.support import factories as f
from tests.support.auth_support import api_client
from tests.support.job_support import run_queue, store_on


def test_warm_up_keeps_the_headline_metrics_the_page_then_serves(
    settings: Settings, engine: Engine, factory: sessionmaker[Session]
) -> None:
    f.seed_benchmarks(factory)
    settings = settings.model_copy(update={"metrics_inline_items": 0})
    store = store_on(settings, engine)
    with transaction(factory) as s:
        params = create(s, WarmUpParams, {"benchmark": f.PAIRWISE, "resamples": 50})
        query = params.headline(s)
        assert query.label == "reference"
        assert stored_result(s, get_benchmark(s, f.PAIRWISE), query, cache=None) is None
        enqueue(s, params)
    assert run_queue(store) == 1
    with transaction(factory) as s:
        job = s.scalar(select(Job).where(Job.kind == WarmUpParams.kind))
        assert job is not None and job.status == "done", job.error
        # Label columns of each label set and each scored detector's scores (a small benchmark
        # keeps no sorted order); no default ranker, so no opening list to rank.
        assert job.result == {
            "benchmark": f.PAIRWISE,
            "label": "reference",
            "computed": True,
            "kept_arrays": 4,
            "opening_list": None,
        }
        kept = stored_result(s, get_benchmark(s, f.PAIRWISE), query, cache=None)
        assert kept is not None and kept.report["rows"]
    with api_client(settings) as client:
        page = client.get(f"/benchmarks/{f.PAIRWISE}/metrics?resamples=50")
    assert page.status_code == 200
    assert f.RM_1 in page.text and "Computing" not in page.text
    with transaction(factory) as s:
        # The page found the figures: it queued no compute_metrics job.
        assert s.scalar(select(func.count()).select_from(Job)) == 1
    # A second warm-up finds them kept and computes nothing.
    with transaction(factory) as s:
        enqueue(s, WarmUpParams(f.PAIRWISE, resamples=50))
    run_queue(store)
    with transaction(factory) as s:
        last = s.scalar(select(Job).order_by(Job.id.desc()).limit(1))
        assert last is not None and last.result["computed"] is False
        assert last.result["kept_arrays"] == 0
