"""Materialised metrics: stored once per request and data version, read by every process.

On both databases, on the bundled JudgeBench data (350 pairs, o1-mini and two reward models).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import metrics as metrics_cli
from app.db import make_engine, session_factory, transaction
from app.ingest.judgebench import import_judgebench
from app.services.evidence.benchmarks import bump_data_version, get_benchmark
from app.services.metrics import metric_results
from app.services.metrics.metric_results import (
    stale_result,
    stored_result,
)
from app.services.metrics.metrics_query import METRICS_CACHE, MetricsQuery
from app.services.metrics.report import metrics_report
from app.settings import Settings
from app.sql.cache import VersionedCache
from app.tables import MetricResult
from tests.ingest.test_helpers import O1_MINI, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.support.auth_support import api_client
from tests.support.metric_results_support import count_computations

R = 200
PAGE = f"/benchmarks/judgebench/metrics?resamples={R}"
TOLERANCE = 1e-12


@pytest.fixture
def judgebench(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])
    METRICS_CACHE.clear()


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[MetricsQuery]:
    """Every query :func:`metric_results.compute_result` computes, in order."""
    return count_computations(monkeypatch, metrics_cli)


@pytest.fixture
def client(settings: Settings, judgebench: None) -> Iterator[TestClient]:
    with api_client(settings) as c:
        yield c


def assert_close(got: Any, want: Any, where: str = "report") -> None:
    """Equal structures; floats equal to within 1e-12 (NaN where NaN)."""
    if isinstance(want, float) or isinstance(got, float):
        assert isinstance(got, int | float) and isinstance(want, int | float), where
        if math.isnan(want):
            assert math.isnan(got), where
        else:
            assert abs(got - want) <= TOLERANCE, f"{where}: {got!r} != {want!r}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key in want:
            assert_close(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list | tuple):
        assert isinstance(got, list | tuple) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_close(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def _results_section(page: str) -> str:
    found = re.search(r'<section id="results".*?</section>', page, re.S)
    assert found is not None
    return found.group(0)


def _direct(factory: sessionmaker[Session], **options: Any) -> dict[str, Any]:
    METRICS_CACHE.clear()
    with factory() as session:
        return metrics_report(session, "judgebench", "reference", resamples=R, **options)


def test_stored_values_and_intervals_equal_the_direct_computation(
    settings: Settings, factory: sessionmaker[Session], judgebench: None
) -> None:
    query = MetricsQuery("judgebench", resamples=R, slice_field="source")
    with factory() as session:
        bench = get_benchmark(session, "judgebench")
        assert stored_result(session, bench, query) is None
        result = metric_results.compute_result(session, query)
    with transaction(factory) as session:
        metric_results.save_result(session, result)
    # Another engine and an empty cache: what a restarted (or another) server process reads.
    METRICS_CACHE.clear()
    engine = make_engine(settings)
    try:
        with session_factory(engine)() as session:
            bench = get_benchmark(session, "judgebench")
            stored = stored_result(session, bench, query, cache=VersionedCache())
    finally:
        engine.dispose()
    assert stored is not None and stored.data_version == bench.data_version
    direct = _direct(factory, slice_field="source")
    assert_close(stored.report, direct)
    intervals = [r["auroc_ci"] for r in stored.report["rows"] if r["auroc_ci"] is not None]
    assert len(intervals) >= 3 and stored.report["judges"]  # intervals and judges compared
    assert stored.plots is not None and stored.plots.roc


def test_a_second_request_and_a_restarted_server_read_the_stored_result(
    settings: Settings, factory: sessionmaker[Session], client: TestClient, computed: list
) -> None:
    first = client.get(PAGE)
    assert first.status_code == 200
    assert len(computed) == 1
    again = client.get(PAGE)
    assert len(computed) == 1  # from this process's cache
    METRICS_CACHE.clear()
    with api_client(settings) as restarted:  # a new app, store and engine
        third = restarted.get(PAGE)
    assert len(computed) == 1  # from the table
    assert _results_section(first.text) == _results_section(again.text)
    assert _results_section(first.text) == _results_section(third.text)
    assert "<svg" in _results_section(third.text)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(MetricResult)) == 1
    # The JSON twin reads the same stored report, equal to the direct computation.
    api = client.get(f"/api/benchmarks/judgebench/metrics?resamples={R}")
    assert api.status_code == 200 and len(computed) == 1
    assert_close(api.json(), _direct(factory))
    # Another request (other resamples) is another result.
    client.get(f"/benchmarks/judgebench/metrics?resamples={R + 1}")
    assert len(computed) == 2


def test_a_data_change_computes_again_and_the_old_result_is_stale_until_then(
    factory: sessionmaker[Session], client: TestClient, computed: list
) -> None:
    client.get(PAGE)
    query = MetricsQuery("judgebench", resamples=R)
    with transaction(factory) as session:
        old = get_benchmark(session, "judgebench").data_version
        bump_data_version(session, get_benchmark(session, "judgebench"))
    with factory() as session:
        bench = get_benchmark(session, "judgebench")
        assert stored_result(session, bench, query) is None
        stale = stale_result(session, bench, query)
    assert stale is not None and stale.data_version == old
    assert client.get(PAGE).status_code == 200
    assert len(computed) == 2
    with factory() as session:
        bench = get_benchmark(session, "judgebench")
        current = stored_result(session, bench, query)
        assert stale_result(session, bench, query) is None  # replaced, not kept
        versions = session.scalars(select(MetricResult.data_version)).all()
    assert current is not None and current.data_version == old + 1
    assert versions == [old + 1]


def test_a_review_event_keeps_original_label_results_and_stales_resolved_ones(
    factory: sessionmaker[Session], client: TestClient, computed: list
) -> None:
    original = MetricsQuery("judgebench", resamples=R)
    resolved = MetricsQuery("judgebench", resamples=R, labels="resolved", k=1)
    assert client.get(PAGE).status_code == 200
    assert client.get(PAGE + "&labels=resolved&k=1").status_code == 200
    assert len(computed) == 2
    with transaction(factory) as session:
        bump_data_version(session, get_benchmark(session, "judgebench"), review=True)
    with factory() as session:
        bench = get_benchmark(session, "judgebench")
        kept = stored_result(session, bench, original, cache=None)
        assert kept is not None and kept.data_version == bench.evidence_version
        assert stored_result(session, bench, resolved, cache=None) is None
        assert stale_result(session, bench, resolved) is not None
    # The original-label page is served as stored; the resolved one is computed again.
    assert client.get(PAGE).status_code == 200 and len(computed) == 2
    assert client.get(PAGE + "&labels=resolved&k=1").status_code == 200 and len(computed) == 3


def test_the_cli_computes_directly_and_stores_for_the_pages(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    client: TestClient,
    computed: list,
    factory: sessionmaker[Session],
) -> None:
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    cli = typer.Typer()
    metrics_cli.register(cli)
    args = ["metrics", "judgebench", "--resamples", str(R), "--json"]
    for _ in range(2):  # the CLI never reads a stored result
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 0, out.output
    assert len(computed) == 2
    assert_close(json.loads(out.stdout), _direct(factory))
    page = client.get(PAGE)
    assert page.status_code == 200 and "<svg" in page.text
    assert len(computed) == 2  # the page read what the CLI stored, figures included
