"""Expected calibration error: equal to an independent numpy computation, then everywhere.

ECE is registered once (``app.stats.registry``); these tests check its value and bootstrap
replicates, and that it reaches the JSON rows, the matrix page, the paired differences and the
defect report's tables without any other code knowing about it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
import typer
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.db import transaction
from app.services.evidence.labels import append_label
from app.services.evidence.resolution import ADJUDICATION
from app.services.metrics.comparisons import comparisons_report
from app.services.review.defect_report import defect_report
from app.stats.bootstrap import group_bootstrap, group_multiplicities
from app.stats.summary import summarise
from app.tables import Instance
from tests.cli.test_metrics_cli import cli, runner
from tests.metrics.test_service import _slice_items, build
from tests.web.test_metrics import client, matrix_rows

# Fixtures of other modules, imported so pytest finds them here.
__all__ = ["cli", "client", "runner"]

TOL = 1e-12


def numpy_ece(y: np.ndarray, p: np.ndarray, n_bins: int = 10) -> float:
    """Sum over 10 equal-width bins of [0, 1] (last closed) of share * |mean p - mean y|."""
    bins = np.minimum((p * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        inside = bins == b
        if inside.any():
            total += inside.mean() * abs(p[inside].mean() - y[inside].mean())
    return total


def grouped(n: int = 500, n_groups: int = 120, seed: int = 0) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, n_groups, n)
    p = rng.random(n)
    y = rng.random(n) < p**1.5  # miscalibrated on purpose: ECE well above 0
    return y, p, groups


def test_point_value_equals_numpy() -> None:
    for seed in range(5):
        y, p, groups = grouped(seed=seed)
        result = group_bootstrap(y, p, groups, metrics=["ece"], resamples=0)
        value = result.estimate("ece").value
        assert value is not None and value > 0.02
        assert value == pytest.approx(numpy_ece(y, p), abs=TOL)


def test_bin_edges_and_perfect_calibration() -> None:
    # 0.1 opens the second bin, 1.0 closes the last one; equal mean p and y in a bin give 0.
    p = np.array([0.0, 0.1, 0.1, 1.0, 1.0])
    y = np.array([0, 0, 1, 1, 1])
    value = group_bootstrap(y, p, np.arange(5), metrics=["ece"], resamples=0).point["ece"][0]
    expected = (1 / 5) * 0.0 + (2 / 5) * abs(0.1 - 0.5) + (2 / 5) * 0.0
    assert value == pytest.approx(expected, abs=TOL)
    perfect = group_bootstrap([0, 1], [0.0, 1.0], ["a", "b"], metrics=["ece"], resamples=0)
    assert perfect.point["ece"][0] == 0.0


def test_replicates_equal_numpy_on_the_materialised_resamples() -> None:
    y, p, groups = grouped(seed=7)
    resamples = 60
    result = group_bootstrap(y, p, groups, metrics=["ece"], resamples=resamples, seed=3)
    codes = np.unique(groups, return_inverse=True)[1]
    per_item = group_multiplicities(np.unique(groups).size, resamples, seed=3)[:, codes]
    for b in range(resamples):
        index = np.repeat(np.arange(y.size), per_item[b])
        assert abs(result.replicates["ece"][0, b] - numpy_ece(y[index], p[index])) <= TOL
    low, high = result.estimate("ece").ci
    assert low < result.estimate("ece").value < high


def test_needs_probabilities_and_lower_is_better() -> None:
    y, p, groups = grouped()
    with pytest.raises(ValueError, match="ece needs probabilities"):
        group_bootstrap(y, p * 2, groups, metrics=["ece"])
    assert summarise(y, p * 2, groups, resamples=10)["ece"] is None
    out = summarise(y, p, groups, resamples=50)
    assert out["ece"] == pytest.approx(numpy_ece(y, p), abs=TOL) and out["ece_ci"] is not None
    # 1 - p ranks the other way round: far worse calibrated, in every resample.
    paired = group_bootstrap(y, [p, 1 - p], groups, metrics=["ece"], resamples=50)
    diff = paired.difference("ece")
    deltas = paired.replicates["ece"][0] - paired.replicates["ece"][1]
    assert diff.estimate.value < -0.2 and diff.first_better == np.mean(deltas < 0) == 1.0


def test_cli_json_rows_carry_ece(runner: CliRunner, cli: typer.Typer) -> None:
    result = runner.invoke(cli, ["metrics", "bench", "--resamples", "100", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    keys = list(row)
    # New keys come after the old ones, which keep their place.
    after = keys.index("choice_matched_auroc_ci") + 1
    assert keys[after : after + 2] == ["ece", "ece_ci"]
    assert row["ece"] is not None and row["ece_ci"][0] <= row["ece"] <= row["ece_ci"][1]
    text = runner.invoke(cli, ["metrics", "bench", "--resamples", "100"]).stdout
    assert f"ece {row['ece']:.3f} [" in text


def test_matrix_page_has_an_ece_column(client: TestClient) -> None:
    page = client.get("/benchmarks/judgebench/metrics?resamples=100").text
    header = re.search(r'<table class="grid metric-matrix">.*?</thead>', page, re.S)
    assert header is not None and header.group(0).count('<th class="num">ECE</th>') == 1
    api = client.get("/api/benchmarks/judgebench/metrics", params={"resamples": 100}).json()
    rows = matrix_rows(page)
    assert len(rows) == 4  # three reward models and o1-mini's two-order score
    for row in (r for r in api["rows"] if r["slice"] is None):
        lo, hi = row["ece_ci"]
        assert rows[row["detector"]][-1] == f"{row['ece']:,.3f}[{lo:.3f}, {hi:.3f}]"


def test_paired_differences_include_ece(factory: sessionmaker[Session]) -> None:
    rng = np.random.default_rng(11)
    truth = rng.random(40) < 0.5
    probe = np.clip(np.where(truth, 0.8, 0.2) + rng.normal(0, 0.1, 40), 0, 1)
    baseline = rng.random(40)
    items = [
        {
            "id": f"i{i}",
            "group": f"g{i // 2}",
            "labels": {"reference": "A" if truth[i] else "B"},
            "scores": {"probe:j": float(probe[i]), "baseline:j": float(baseline[i])},
        }
        for i in range(40)
    ]
    with transaction(factory) as session:
        build(session, items)
    with factory() as session:
        report = comparisons_report(session, "bench", "reference", resamples=200)
    (pair,) = report["pairs"]
    assert (pair["first"], pair["second"]) == ("probe:j", "baseline:j")
    ece = {m["metric"]: m for m in pair["metrics"]}["ece"]
    y = truth.astype(int)
    assert ece["p1_value"] == pytest.approx(numpy_ece(y, probe), abs=TOL)
    assert ece["p2_value"] == pytest.approx(numpy_ece(y, baseline), abs=TOL)
    assert ece["difference"] == pytest.approx(ece["p1_value"] - ece["p2_value"], abs=TOL)
    assert ece["higher_is_better"] is False and ece["difference_ci"] is not None


def test_defect_report_compares_ece(factory: sessionmaker[Session]) -> None:
    items = _slice_items()
    with transaction(factory) as session:
        build(session, items)
        ids = dict(session.execute(select(Instance.external_id, Instance.id)).all())
        for item in items[:6]:  # adjudicate six references to the other response
            other = {"A": "B", "B": "A"}[item["labels"]["reference"]]
            append_label(session, ids[item["id"]], "reference", other, source=ADJUDICATION)
    with factory() as session:
        report = defect_report(session, "bench", label="reference", resamples=100)
    (entry,) = report["metrics"]
    (detector,) = entry["comparison"]["detectors"]
    ece = {m["metric"]: m for m in detector["metrics"]}["ece"]
    p = np.array([it["scores"]["probe"] for it in items])
    before = np.array([it["labels"]["reference"] == "A" for it in items])
    after = before.copy()
    after[:6] = ~after[:6]
    assert ece["original"] == pytest.approx(numpy_ece(before, p), abs=TOL)
    assert ece["resolved"] == pytest.approx(numpy_ece(after, p), abs=TOL)
    assert ece["difference"] == pytest.approx(ece["resolved"] - ece["original"], abs=TOL)
    assert ece["original_ci"] is not None and ece["resolved_ci"] is not None
