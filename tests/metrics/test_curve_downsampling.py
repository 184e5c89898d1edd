"""Curves thinned for drawing: at most 500 points, ends kept, monotone, the same shape."""

from __future__ import annotations

import re

import numpy as np
import pytest

from app.services.metrics.metrics_plots import (
    PLOT_POINTS,
    Curve,
    MetricsPlots,
    downsample_curve,
    plots_from_json,
    plots_to_json,
)
from app.services.metrics.svg_plots import metrics_figures
from app.stats.calibration import pr_curve_points, roc_curve_points
from app.stats.metrics import auroc


def _scores(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    # Continuous scores (every one distinct) that rank positives higher on average.
    return y, rng.normal(size=n) + 0.8 * y


def _trapezoid(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))


def test_a_big_roc_curve_keeps_at_most_500_points_its_ends_order_and_area() -> None:
    y, s = _scores(100_000)
    points = roc_curve_points(y, s)
    assert points is not None
    fpr, tpr = np.array(points["fpr"]), np.array(points["tpr"])
    assert fpr.size > 20 * PLOT_POINTS  # a curve worth thinning
    x, v = downsample_curve(fpr, tpr)
    assert 2 <= x.size <= PLOT_POINTS
    assert (x[0], v[0], x[-1], v[-1]) == (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(v) >= 0)
    # Every kept point is a point of the curve, in the curve's order.
    at = np.searchsorted(fpr, x, side="left")
    assert np.all(np.isin(x, fpr)) and np.all(np.diff(at) >= 0)
    # The shape: the area under the thinned polyline is the exact AUROC to within 1e-3.
    assert _trapezoid(x, v) == pytest.approx(auroc(y, s), abs=1e-3)
    assert x.size > PLOT_POINTS // 2  # the budget is used, not a handful of points


def test_a_pr_curve_keeps_its_recall_order_and_ends() -> None:
    y, s = _scores(50_000, seed=1)
    points = pr_curve_points(y, s)
    assert points is not None
    recall, precision = np.array(points["recall"]), np.array(points["precision"])
    x, v = downsample_curve(recall, precision, 300)
    assert x.size <= 300
    assert (x[0], v[0], x[-1], v[-1]) == (recall[0], precision[0], recall[-1], precision[-1])
    step = np.diff(recall)
    direction = np.sign(step[step != 0][0])
    assert np.all(direction * np.diff(x) >= 0)


def test_short_curves_and_degenerate_ones() -> None:
    x, v = downsample_curve([0.0, 0.5, 1.0], [0.0, 0.7, 1.0])
    assert x.tolist() == [0.0, 0.5, 1.0] and v.tolist() == [0.0, 0.7, 1.0]
    x, v = downsample_curve(np.zeros(1000), np.ones(1000), 10)
    assert x.tolist() == [0.0, 0.0] and v.tolist() == [1.0, 1.0]
    for budget in (2, 3, 7, 499):
        x, _ = downsample_curve(np.linspace(0, 1, 5000), np.linspace(0, 1, 5000) ** 3, budget)
        assert 2 <= x.size <= budget and (x[0], x[-1]) == (0.0, 1.0)
    with pytest.raises(ValueError, match="at least 2"):
        downsample_curve([0.0, 1.0], [0.0, 1.0], 1)


def test_the_drawn_figures_have_no_more_points_than_the_thinned_curves() -> None:
    xs = np.linspace(0, 1, 2000)
    x, v = downsample_curve(xs, np.sqrt(xs))
    plots = MetricsPlots(
        positive="A",
        negative="B",
        roc=[Curve("d<1>", x.tolist(), v.tolist())],
        pr=[],
        pr_baseline=None,
        reliability=[],
        histograms=[("d<1>", {"edges": [0.0, 0.5, 1.0], "positive": [3, 4], "negative": [5, 1]})],
    )
    again = plots_from_json(plots_to_json(plots))
    assert again == plots
    figures = metrics_figures(again)
    polyline = re.search(r'points="([^"]*)"', figures["roc"])
    assert polyline is not None
    assert len(polyline.group(1).split()) == x.size <= PLOT_POINTS
    assert "d&lt;1&gt;" in figures["roc"] and "d<1>" not in figures["roc"]
    assert figures["pr"] is None and len(figures["histograms"]) == 1
