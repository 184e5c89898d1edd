"""Plot data of the metrics page: ROC and PR points, reliability bins and score histograms.

Plain numbers from :mod:`app.stats.calibration` for the request's detectors; the web layer
only draws them (:mod:`app.services.metrics.svg_plots`). Curves are thinned for drawing
(:func:`downsample_curve`): a detector with a million distinct scores has a million-point ROC
curve, of which a 300-pixel plot shows a few hundred; the exact AUROC and AUPRC are the metric
rows', never read off these points.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from app.services.metrics.metrics_query import MetricsData
from app.stats.calibration import (
    pr_curve_arrays,
    reliability_bins,
    roc_curve_arrays,
    score_histograms,
)
from app.stats.registry import scores_are_probabilities

__all__ = [
    "PLOT_POINTS",
    "Curve",
    "MetricsPlots",
    "downsample_curve",
    "plot_data",
    "plots_from_json",
    "plots_to_json",
]

PLOT_POINTS = 500
"""At most this many points per drawn curve."""


@dataclass(frozen=True)
class Curve:
    """One detector's curve: points in data coordinates, in drawing order."""

    detector: str
    xs: list[float]
    ys: list[float]


@dataclass(frozen=True)
class MetricsPlots:
    """What the four plots of the metrics page show, detector by detector (legend order).

    ``pr_baseline`` is the precision of a random ranking (the mean prevalence over the
    detectors with a PR curve), ``None`` without one; ``reliability`` holds only detectors
    whose scores are probabilities; ``negative`` is ``"not <positive>"`` for a one-class set.
    """

    positive: str
    negative: str
    roc: list[Curve]
    pr: list[Curve]
    pr_baseline: float | None
    reliability: list[tuple[str, list[dict[str, Any]]]]
    histograms: list[tuple[str, dict[str, Any]]]


def downsample_curve(
    xs: ArrayLike, ys: ArrayLike, max_points: int = PLOT_POINTS
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """At most ``max_points`` of a curve's points, evenly spaced along its length.

    The points kept are a subsequence, so a coordinate that is monotone along the curve (a ROC
    curve's both, a PR curve's recall) stays monotone; the first and last points are always
    kept. Spacing by arc length (in the unit square) rather than by index keeps the shape: a
    long straight run needs few points, the knee where the curve turns gets its share.

    Parameters
    ----------
    xs, ys : array-like of float, shape (n,)
        The curve's points in drawing order.
    max_points : int
        Upper bound on the points returned (at least 2).

    Returns
    -------
    (ndarray, ndarray) of float64, each shape (m,), m <= min(n, max_points)

    """
    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    if x.size <= max_points:
        return x, y
    arc = np.concatenate(([0.0], np.cumsum(np.hypot(np.diff(x), np.diff(y)))))
    if arc[-1] == 0.0:
        # Every point in one place: the ends say it all.
        return x[[0, -1]], y[[0, -1]]
    # For each of max_points evenly spaced lengths, the first point at or beyond it; the last
    # target is the full length, whose first point may precede the curve's last index.
    targets = np.linspace(0.0, arc[-1], max_points)
    picked = np.unique(np.searchsorted(arc, targets, side="left"))
    picked = np.union1d(picked[picked < x.size], [0, x.size - 1])
    if picked.size > max_points:
        # The union added the last index beside max_points targets: drop one inside point.
        picked = np.delete(picked, picked.size - 2)
    return x[picked], y[picked]


def _curve(name: str, xs: ArrayLike, ys: ArrayLike, max_points: int) -> Curve:
    x, y = downsample_curve(xs, ys, max_points)
    return Curve(name, x.tolist(), y.tolist())


def plot_data(
    data: MetricsData,
    max_points: int = PLOT_POINTS,
    on_detector: Callable[[], None] | None = None,
) -> MetricsPlots:
    """The plots of every detector of the request on all labelled items it scored.

    Curves keep at most ``max_points`` points each (:func:`downsample_curve`);
    ``on_detector`` is called after each detector (job progress).

    Returns
    -------
    MetricsPlots
        A detector is left out of the ROC curves with one class, out of the PR curves with no
        positive, and out of every plot when it scored no item.

    """
    positive = data.target.positive
    negative = data.target.negative or f"not {positive}"
    roc: list[Curve] = []
    pr: list[Curve] = []
    rel: list[tuple[str, list[dict[str, Any]]]] = []
    hists: list[tuple[str, dict[str, Any]]] = []
    prevalences = []
    for detector in data.detectors:
        sample = data.sample(detector)
        if sample.n > 0:
            y, (s,) = sample.y, sample.scores
            roc_points = roc_curve_arrays(y, s)
            if roc_points is not None:
                fpr, tpr, _ = roc_points
                roc.append(_curve(detector.name, fpr, tpr, max_points))
            pr_points = pr_curve_arrays(y, s)
            if pr_points is not None:
                precision, recall, _ = pr_points
                pr.append(_curve(detector.name, recall, precision, max_points))
                prevalences.append(float(y.mean()))
            if scores_are_probabilities(s):
                rel.append((detector.name, reliability_bins(y, s)))
            hists.append((detector.name, score_histograms(y, s)))
        if on_detector is not None:
            on_detector()
    baseline = float(np.mean(prevalences)) if prevalences else None
    return MetricsPlots(positive, negative, roc, pr, baseline, rel, hists)


def plots_to_json(plots: MetricsPlots) -> dict[str, Any]:
    """The plots as JSON-ready data (:func:`plots_from_json` reads it back)."""
    return asdict(plots)


def plots_from_json(data: dict[str, Any]) -> MetricsPlots:
    """The plots :func:`plots_to_json` wrote (tuples come back from JSON lists)."""
    return MetricsPlots(
        positive=data["positive"],
        negative=data["negative"],
        roc=[Curve(**c) for c in data["roc"]],
        pr=[Curve(**c) for c in data["pr"]],
        pr_baseline=data["pr_baseline"],
        reliability=[(name, bins) for name, bins in data["reliability"]],
        histograms=[(name, counts) for name, counts in data["histograms"]],
    )
