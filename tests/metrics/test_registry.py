"""The metric registry drives every metric list; one metrics request reads its items once.

Also: the query object's validation, the paired differences of several metrics from one
bootstrap, and the typed API body that ``/openapi.json`` documents from the registry.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.metrics import metrics_query
from app.services.metrics.metric_matrix import (
    HEADLINE_METRICS,
    INTERVAL_METRICS,
    MATRIX_METRICS,
    MetricRow,
)
from app.services.metrics.metrics_query import MetricsQuery
from app.settings import Settings
from app.stats import bootstrap, registry, summary
from app.stats.registry import ANSWER_METRICS, REGISTRY, Need, applicable
from app.store import Store
from tests.ingest.test_helpers import O1_MINI_JUDGE
from tests.review.test_review import _close_clients, _login, _make_queue, store
from tests.support import factories as f
from tests.support.registry_support import row_keys
from tests.web.test_metrics import client

# Fixtures of other modules, imported so pytest finds them here: the JudgeBench app of
# test_web_metrics, the seeded store and client clean-up of test_review.
__all__ = ["_close_clients", "client", "store"]

R = 50  # resamples: the counts and shapes are under test here, not the intervals


def test_derived_names_come_from_the_registry() -> None:
    assert tuple(REGISTRY) == bootstrap.METRICS
    assert {n: m.higher_is_better for n, m in REGISTRY.items()} == bootstrap.HIGHER_IS_BETTER
    assert tuple(m.name for m in MATRIX_METRICS) == summary.SUMMARY_METRICS
    assert tuple(m.name for m in MATRIX_METRICS if m.interval) == INTERVAL_METRICS
    # What the matrix reported before the registry: accuracy is computed but not a column.
    assert summary.SUMMARY_METRICS[:5] == (
        "prevalence",
        "auroc",
        "auprc",
        "brier",
        "choice_matched_auroc",
    )
    assert "accuracy" in REGISTRY and "accuracy" not in summary.SUMMARY_METRICS
    assert not REGISTRY["prevalence"].interval and not REGISTRY["prevalence"].per_detector
    assert not REGISTRY["brier"].higher_is_better


def test_json_row_has_a_key_per_registered_column() -> None:
    values = {m.name: 0.5 for m in MATRIX_METRICS}
    intervals = {name: [0.25, 0.75] for name in INTERVAL_METRICS}
    row = MetricRow("d", None, "all", 10, 5, values, intervals).as_dict()
    assert list(row) == row_keys()
    assert row["prevalence"] == 0.5 and row[f"{INTERVAL_METRICS[0]}_ci"] == [0.25, 0.75]


def test_applicable_reads_each_metrics_needs() -> None:
    probs, raw = np.array([0.1, 0.9]), np.array([-2.0, 3.0])
    with_probs = applicable(MATRIX_METRICS, probs, strata=True, ranking=True)
    assert with_probs == MATRIX_METRICS
    without = applicable(MATRIX_METRICS, probs, raw, strata=False)
    assert [m.name for m in without] == [
        m.name
        for m in MATRIX_METRICS
        if not m.needs & {Need.PROBABILITIES, Need.STRATA, Need.RANKING}
    ]
    assert "precision_at_100" not in {m.name for m in without}
    assert "brier" not in {m.name for m in without}
    assert "choice_matched_auroc" not in {m.name for m in without}
    assert registry.scores_are_probabilities(probs) and not registry.scores_are_probabilities(raw)
    with pytest.raises(ValueError, match="unknown metric 'f1'"):
        registry.get_metric("f1")


def test_paired_differences_equal_one_metric_at_a_time() -> None:
    rng = np.random.default_rng(3)
    n = 200
    y = rng.random(n) < 0.4
    p1 = np.clip(0.3 * y + 0.7 * rng.random(n), 0, 1)
    p2 = rng.random(n)
    groups = rng.integers(0, 60, n)
    choice = np.where(rng.random(n) < 0.5, "A", "B")
    names = [m.name for m in applicable(registry.INTERVAL, p1, p2, strata=True)]
    assert len(names) >= 4
    together = summary.paired_differences(
        y, p1, p2, groups, names, choice=choice, resamples=120, seed=5
    )
    assert [d["metric"] for d in together] == names
    for entry in together:
        alone = summary.paired_difference(
            y, p1, p2, groups, entry["metric"], choice=choice, resamples=120, seed=5
        )
        assert entry == alone
        assert entry["difference_ci"] is not None
    with pytest.raises(ValueError, match="metric must be one of"):
        summary.paired_differences(y, p1, p2, groups, ["auroc", "prevalence"])


def test_query_is_validated_in_one_place() -> None:
    query = MetricsQuery("b", detectors=("x", "y", "x"), resamples=10)
    assert query.detectors == ("x", "y")
    assert MetricsQuery("b", detectors=()).detectors is None
    for bad, field in (
        ({"resamples": -1}, "resamples"),
        ({"seed": -2}, "seed"),
        ({"labels": "latest"}, "labels"),
        ({"k": 0}, "k must be"),
    ):
        with pytest.raises(InvalidInput, match=field):
            MetricsQuery("b", **bad)
    # Frozen and hashable: a query can key a cache.
    assert hash(MetricsQuery("b", seed=1)) == hash(MetricsQuery("b", seed=1))


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of the labelled-items loader, by label set (patched where it is looked up)."""
    calls: list[str] = []
    real: Callable[..., Any] = metrics_query.load_labelled

    def counting(session: Session, benchmark: Any, label: str, **kwargs: Any) -> Any:
        calls.append(label)
        return real(session, benchmark, label, **kwargs)

    monkeypatch.setattr(metrics_query, "load_labelled", counting)
    return calls


@pytest.mark.parametrize(
    "params",
    [
        {"resamples": R},
        {"resamples": R, "slice": "source"},
        {"resamples": R, "label": f"flip:{O1_MINI_JUDGE}"},
        {"resamples": R, "labels": "resolved", "k": 1},
    ],
)
def test_one_load_of_labelled_items_per_request(
    client: TestClient, loads: list[str], params: dict[str, Any]
) -> None:
    # The first request computes (one load); every later one, page or API, reads the stored
    # result (app.services.metrics.metric_results) and loads nothing.
    want = [params.get("label", "reference")]
    for path in ("/benchmarks/judgebench/metrics", "/api/benchmarks/judgebench/metrics"):
        for attempt in ("first", "again"):
            loads.clear()
            r = client.get(path, params=params)
            assert r.status_code == 200, (path, attempt, r.text[:300])
            assert loads == want, (path, attempt)
            want = []
    # The page really drew what it read: the matrix rows and a plot per detector.
    page = client.get("/benchmarks/judgebench/metrics", params=params).text
    # Three reward models and o1-mini's two-order score.
    assert page.count('<tr class="all"') == 4
    assert page.count('<svg class="plot histogram"') == 4


def test_api_body_is_typed_from_the_registry(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/api/benchmarks/{name}/metrics"]["get"]
    body = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/MetricsReportModel")
    schemas = spec["components"]["schemas"]
    row = schemas["MetricRow"]["properties"]
    for metric in MATRIX_METRICS:
        assert metric.name in row
        assert (f"{metric.name}_ci" in row) == metric.interval
    report = schemas["MetricsReportModel"]["properties"]
    assert {"rows", "judges", "comparisons", "constant_predictors"} <= set(report)
    for metric in ANSWER_METRICS:
        assert metric.name in row  # rows of models' answers are documented too
    # The typed body drops nothing and adds nothing: a row of scores has exactly its keys.
    api = client.get("/api/benchmarks/judgebench/metrics", params={"resamples": R}).json()
    assert api["rows"] and list(api["rows"][0]) == row_keys()
    assert set(api["rows"][0]) <= set(row)
    answers_only = {"kind", "agreement", "confusion"}
    assert set(api) == set(report) - answers_only
    assert api["judges"] and set(api["judges"][0]) == set(schemas["JudgeSummary"]["properties"])


def test_queue_table_shows_the_headline_metrics(store: Store, settings: Settings) -> None:
    assert [m.name for m in HEADLINE_METRICS] == ["auroc", "brier"]  # the table before the registry
    reviewer, csrf = _login(settings, "rita", "reviewer")
    page = reviewer.get(f"/queues/{_make_queue(reviewer, csrf)}/comparison").text
    section = re.search(r'<section class="before-accept".*?</section>', page, re.S)
    assert section is not None
    header = "".join(
        f"<th>{m.title} original</th><th>{m.title} resolved</th>" for m in HEADLINE_METRICS
    )
    assert f'<th class="num">Changed items</th>{header}</tr>' in section.group(0)
    rows = re.findall(r"<tr><td>(.*?)</td>(.*?)</tr>", section.group(0), re.S)
    assert [name for name, _ in rows] == [f.RM_1, f.RM_2]
    for _, cells in rows:
        # Changed items, then an original and a resolved estimate per headline metric.
        assert cells.count("<td") == 1 + 2 * len(HEADLINE_METRICS)
