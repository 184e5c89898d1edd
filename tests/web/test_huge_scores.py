"""A detector whose scores are all equal and huge still gets a metrics page (issue 21 item 16).

``np.histogram_bin_edges`` refused the range numpy widened by 0.5 around 1e16, and the whole
page answered 500.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.detectors import ensure_detector
from app.services.evidence.scores import replace_scores
from app.services.metrics.metrics_query import METRICS_CACHE
from app.settings import Settings
from app.tables import Instance
from tests.support import factories as f
from tests.support.auth_support import api_client


@pytest.mark.parametrize("value", [1e16, 1e300])
def test_equal_huge_scores_leave_the_metrics_page_up(
    settings: Settings, factory: sessionmaker[Session], value: float
) -> None:
    f.seed_benchmarks(factory)
    with transaction(factory) as session:
        bench = get_benchmark(session, f.PAIRWISE)
        detector = ensure_detector(session, "huge", "reward_model")
        ids = session.scalars(select(Instance.id).where(Instance.benchmark_id == bench.id))
        replace_scores(session, detector, bench, {i: (value, {}) for i in ids})
    METRICS_CACHE.clear()
    with api_client(settings, raise_server_exceptions=False) as client:
        page = client.get(f"/benchmarks/{f.PAIRWISE}/metrics", params={"resamples": 50})
        assert page.status_code == 200, page.text[:500]
        assert "huge" in page.text and "<svg" in page.text
