"""Slices in one bootstrap pass: values equal scikit-learn, replicates the documented draw.

Every slice is group-bootstrapped within itself on shared resamples
(:func:`app.stats.bootstrap.sliced_group_bootstrap`): the point values are scikit-learn's on
the slice's items, replicate b is the metric on the items of the groups resample b drew in
that slice (:func:`app.stats.bootstrap.stratified_multiplicities`), and the metrics page shows
them as a detector x slice pivot with a macro-average column.
"""

from __future__ import annotations

import html
import re
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.metrics.metric_matrix import MACRO, slices_seed
from app.services.metrics.report import metric_rows
from app.settings import Settings
from app.stats.bootstrap import (
    group_bootstrap,
    group_multiplicities,
    percentile_interval,
    sliced_group_bootstrap,
    stratified_multiplicities,
)
from tests.metrics.test_service import build
from tests.support.auth_support import api_client

TOL = 1e-12
RESAMPLES = 200
METRICS = ("auroc", "auprc", "brier")
SKLEARN = {"auroc": roc_auc_score, "auprc": average_precision_score, "brier": brier_score_loss}


def _data(seed: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Items in groups of one to three, five slices of uneven size; one slice has one class."""
    rng = np.random.default_rng(seed)
    slices = np.repeat(["c", "a", "e", "b", "d"], [40, 25, 12, 30, 9])
    n = slices.size
    groups = np.array([f"g{i // rng.integers(1, 4)}-{s}" for i, s in enumerate(slices)])
    y = rng.random(n) < 0.45
    y[slices == "d"] = True  # one class: AUROC undefined there
    p = np.clip(0.5 * y + rng.normal(0.25, 0.25, n), 0.0, 1.0)
    return y, p, groups, slices


def test_one_stratum_is_the_unstratified_draw() -> None:
    assert np.array_equal(
        stratified_multiplicities([37], 50, seed=3), group_multiplicities(37, 50, 3)
    )


def test_stratified_draws_stay_within_each_stratum() -> None:
    sizes = [5, 1, 9, 3]
    drawn = stratified_multiplicities(sizes, 200, seed=8)
    assert drawn.shape == (200, sum(sizes))
    edges = np.cumsum([0, *sizes])
    for s, m in enumerate(sizes):
        assert (drawn[:, edges[s] : edges[s + 1]].sum(axis=1) == m).all()
    # Reproducible from the seed, and a different seed draws differently.
    assert np.array_equal(drawn, stratified_multiplicities(sizes, 200, seed=8))
    assert not np.array_equal(drawn, stratified_multiplicities(sizes, 200, seed=9))


def test_slice_points_equal_sklearn_and_group_bootstrap() -> None:
    y, p, groups, slices = _data()
    results = sliced_group_bootstrap(y, p, groups, slices, metrics=METRICS, resamples=50, seed=1)
    assert list(results) == ["a", "b", "c", "d", "e"]
    for name, result in results.items():
        inside = slices == name
        alone = group_bootstrap(y[inside], p[inside], groups[inside], metrics=METRICS, resamples=0)
        assert result.n_items == inside.sum() and result.n_groups == alone.n_groups
        for metric in METRICS:
            value = result.estimate(metric).value
            if name == "d" and metric == "auroc":
                assert value is None
                continue
            expected = SKLEARN[metric](y[inside], p[inside])
            assert value is not None and abs(value - expected) <= TOL
            assert value == alone.estimate(metric).value


def test_slice_replicates_follow_the_stratified_draw() -> None:
    """Replicate b of slice s: scikit-learn on the items of the groups resample b drew in s."""
    y, p, groups, slices = _data(seed=6)
    resamples, seed = 12, 5
    results = sliced_group_bootstrap(
        y, p, groups, slices, metrics=METRICS, resamples=resamples, seed=seed
    )
    names = sorted(set(slices.tolist()))
    units = [np.unique(groups[slices == s], return_inverse=True)[1] for s in names]
    drawn = stratified_multiplicities([u.max() + 1 for u in units], resamples, seed)
    start = 0
    for name, codes in zip(names, units, strict=True):
        inside = slices == name
        counts = drawn[:, start : start + codes.max() + 1][:, codes]  # (B, items of the slice)
        start += codes.max() + 1
        for b in range(resamples):
            ys, ps = np.repeat(y[inside], counts[b]), np.repeat(p[inside], counts[b])
            for metric in METRICS:
                got = results[name].replicates[metric][0, b]
                # AUROC is undefined with one class; AUPRC too without positives.
                one_class = len(set(ys.tolist())) < 2
                if (metric == "auroc" and one_class) or (metric == "auprc" and not ys.any()):
                    assert np.isnan(got)
                    continue
                assert abs(got - SKLEARN[metric](ys, ps)) <= TOL, (name, b, metric)


@pytest.mark.parametrize("threads", [1, 3])
def test_slices_do_not_depend_on_threads(threads: int) -> None:
    y, p, groups, slices = _data()
    one = sliced_group_bootstrap(y, p, groups, slices, resamples=40, seed=2, n_threads=1)
    other = sliced_group_bootstrap(y, p, groups, slices, resamples=40, seed=2, n_threads=threads)
    for name in one:
        for metric in METRICS:
            assert np.array_equal(
                one[name].replicates[metric], other[name].replicates[metric], equal_nan=True
            )


# ----------------------------------------------------------------------------- service and page


def _items(n: int = 90) -> list[dict[str, Any]]:
    """Pairs in four sources, two per question; one source is unscored by ``probe``."""
    rng = np.random.default_rng(12)
    items = []
    for i in range(n):
        source = ["news", "code", "math", "chat"][i % 4]
        label = "A" if rng.random() < 0.5 else "B"
        signal = 0.3 if label == "A" else -0.3
        scores = {"probe": float(np.clip(0.5 + signal + rng.normal(0, 0.25), 0, 1))}
        if source != "chat":
            scores["rival"] = float(rng.random())
        items.append(
            {
                "id": f"p{i:03d}",
                "group": f"q{i // 2}",
                "payload": {"source": source},
                "labels": {"reference": label},
                "scores": scores,
            }
        )
    return items


def test_matrix_slices_are_the_single_pass(factory: sessionmaker[Session]) -> None:
    items = _items()
    with transaction(factory) as session:
        build(session, items)
    with factory() as session:
        _, rows = metric_rows(
            session, "bench", slice_field="source", resamples=RESAMPLES, seed=3, cache=None
        )
    probe = [it for it in items if "probe" in it["scores"]]
    y = np.array([it["labels"]["reference"] == "A" for it in probe])
    p = np.array([it["scores"]["probe"] for it in probe])
    groups = np.array([it["group"] for it in probe])
    slices = np.array([it["payload"]["source"] for it in probe])
    direct = sliced_group_bootstrap(
        y, p, groups, slices, metrics=METRICS, resamples=RESAMPLES, seed=slices_seed(3)
    )
    by_slice = {r.slice: r for r in rows if r.detector == "probe"}
    assert list(by_slice) == [None, "chat", "code", "math", "news", MACRO]
    for name, result in direct.items():
        row = by_slice[name]
        assert row.n == result.n_items and row.n_groups == result.n_groups
        for metric in METRICS:
            estimate = result.estimate(metric)
            assert row.values[metric] == estimate.value
            assert row.intervals[metric] == estimate.ci
            inside = slices == name
            expected = SKLEARN[metric](y[inside], p[inside])
            assert abs(row.values[metric] - expected) <= TOL
    # The macro-average's interval: percentiles of the mean of the slices' replicates b.
    mean = np.mean([direct[s].replicates["auroc"][0] for s in direct], axis=0)
    low, high, _ = percentile_interval(mean)
    assert by_slice[MACRO].intervals["auroc"] == [low, high]
    # A detector that scored no item of a slice has an empty cell there.
    rival = {r.slice: r for r in rows if r.detector == "rival"}
    assert rival["chat"].n == 0 and rival["chat"].values["auroc"] is None
    assert rival[MACRO].n == sum(1 for it in items if "rival" in it["scores"])


def test_metrics_page_pivots_detectors_by_slice(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    items = _items()
    with transaction(factory) as session:
        build(session, items)
    with api_client(settings) as client:
        page = client.get(f"/benchmarks/bench/metrics?slice=source&resamples={RESAMPLES}").text
        report = client.get(
            "/api/benchmarks/bench/metrics", params={"slice": "source", "resamples": RESAMPLES}
        ).json()
    pivots = dict(
        re.findall(r'<details class="pivot" data-metric="([^"]+)"[^>]*>(.*?)</details>', page, re.S)
    )
    assert {"auroc", "auprc", "brier"} <= set(pivots)
    # AUROC's table is the one open first.
    assert re.search(r'<details class="pivot" data-metric="auroc" open>', page)
    head = re.findall(r"<th[^>]*>(.*?)</th>", pivots["auroc"])
    assert head == ["Detector", "all items", "chat", "code", "math", "news", "macro-average"]
    rows = {
        d: cells
        for d, cells in re.findall(r'<tr data-detector="([^"]+)">(.*?)</tr>', pivots["auroc"], re.S)
    }
    assert list(rows) == ["probe", "rival"]
    order = [None, "chat", "code", "math", "news", MACRO]
    for detector, body in rows.items():
        shown = [
            html.unescape(re.sub(r"<[^>]+>", " ", td)).split()
            for td in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)
        ][1:]
        expected = {r["slice"]: r for r in report["rows"] if r["detector"] == detector}
        for column, text in zip(order, shown, strict=True):
            row = expected[column]
            if row["auroc"] is None:
                assert text == ["—"]
                continue
            lo, hi = row["auroc_ci"]
            assert text == [f"{row['auroc']:.3f}", f"[{lo:.3f},", f"{hi:.3f}]"]
    # The detectors table keeps one all-items row per detector.
    matrix = re.search(r'<table class="grid metric-matrix">(.*?)</table>', page, re.S)
    assert matrix is not None and matrix.group(1).count('<tr class="all"') == 2
