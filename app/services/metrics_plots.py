"""Plot data of the metrics page: ROC and PR points, reliability bins and score histograms.

Plain numbers from :mod:`app.stats.calibration` for the request's detectors; the web layer
only draws them (:mod:`app.web.svg_plots`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.services.metrics_query import MetricsData
from app.stats.calibration import (
    pr_curve_points,
    reliability_bins,
    roc_curve_points,
    score_histograms,
)
from app.stats.registry import scores_are_probabilities

__all__ = ["Curve", "MetricsPlots", "plot_data"]


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


def plot_data(data: MetricsData) -> MetricsPlots:
    """The plots of every detector of the request on all labelled items it scored.

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
        if sample.n == 0:
            continue
        y, (s,) = sample.y, sample.scores
        points = roc_curve_points(y, s)
        if points is not None:
            roc.append(Curve(detector.name, points["fpr"], points["tpr"]))
        curve = pr_curve_points(y, s)
        if curve is not None:
            pr.append(Curve(detector.name, curve["recall"], curve["precision"]))
            prevalences.append(float(y.mean()))
        if scores_are_probabilities(s):
            rel.append((detector.name, reliability_bins(y, s)))
        hists.append((detector.name, score_histograms(y, s)))
    baseline = float(np.mean(prevalences)) if prevalences else None
    return MetricsPlots(positive, negative, roc, pr, baseline, rel, hists)
