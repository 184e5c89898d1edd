"""Metric matrix page and its JSON twin.

Thin routes: the numbers come from :mod:`app.services.metrics` and
:mod:`app.services.judge_summary` (via ``metrics_report``); the plots from
:mod:`app.stats.calibration` drawn by :mod:`app.web.svg_plots`. Every choice lives in the
query string.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Query, Request
from sqlalchemy.orm import Session
from starlette.responses import HTMLResponse

from app.db import transaction
from app.services.facets import describe_benchmark
from app.services.instance_filter import FlipState, InstanceFilter, SliceCondition
from app.services.metrics import (
    LABEL_MODES,
    MACRO,
    MISSING_SLICE,
    LabelMode,
    detector_scores,
    get_detector,
    load_labelled,
    metrics_report,
)
from app.stats.calibration import (
    pr_curve_points,
    reliability_bins,
    roc_curve_points,
    score_histograms,
)
from app.web import svg_plots
from app.web.benchmark_params import DetectorParam, LabelParam, default_label, non_blank
from app.web.deps import ReadCache, StoreDep
from app.web.filters import Blank
from app.web.templating import render
from app.web.urls import benchmark_url

router = APIRouter(include_in_schema=False)
api_router = APIRouter(prefix="/api", tags=["metrics"])

DEFAULT_RESAMPLES = 2000

SliceParam = Annotated[str | None, Blank, Query(description="Payload field defining slices.")]
ResamplesParam = Annotated[int, Query(ge=1, le=100_000, description="Group-bootstrap resamples.")]
SeedParam = Annotated[int, Query(ge=0, description="Bootstrap seed.")]
LabelsParam = Annotated[
    LabelMode,
    Query(description="`original` labels, or `resolved` ones (adjudication, else k votes)."),
]
ResolveKParam = Annotated[
    int, Query(ge=1, description="Resolved labels: agreeing voters needed to override.")
]

METRIC_COLUMNS: tuple[tuple[str, str], ...] = (
    ("auroc", "AUROC"),
    ("auprc", "AUPRC"),
    ("brier", "Brier"),
    ("choice_matched_auroc", "Choice-matched AUROC"),
)


def plot_data(
    session: Session,
    benchmark: str,
    label: str,
    detectors: list[str],
    labels: LabelMode = "original",
    k: int = 2,
) -> dict[str, Any]:
    """The four plots of the metrics page for ``detectors`` on all labelled items.

    Parameters
    ----------
    session : Session
        Read-only session.
    benchmark : str
        Benchmark name.
    label : str
        Label set (binary, as the metric rows use it).
    detectors : list of str
        Detector names, in legend order.
    labels : {"original", "resolved"}
        Which value of the label set (as the metric rows read it).
    k : int
        Agreeing voters that override the original, for resolved labels.

    Returns
    -------
    dict
        ``roc``, ``pr``, ``reliability`` (Markup or ``None`` when no detector defines the
        plot) and ``histograms`` (list of (detector, Markup)).

    """
    items = load_labelled(session, benchmark, label, labels=labels, k=k)
    positive = items.target.positive
    negative = items.target.negative or f"not {positive}"
    roc, pr, rel, hists = [], [], [], []
    prevalences = []
    for name in detectors:
        p = detector_scores(session, get_detector(session, name), items)
        keep = ~np.isnan(p)
        y, s = items.y[keep], p[keep]
        if s.size == 0:
            continue
        points = roc_curve_points(y, s)
        if points is not None:
            roc.append(svg_plots.Series(name, points["fpr"], points["tpr"]))
        curve = pr_curve_points(y, s)
        if curve is not None:
            pr.append(svg_plots.Series(name, curve["recall"], curve["precision"]))
            prevalences.append(float(y.mean()))
        if s.min() >= 0.0 and s.max() <= 1.0:
            rel.append((name, reliability_bins(y, s)))
        hists.append(
            (name, svg_plots.histogram_plot(name, score_histograms(y, s), positive, negative))
        )
    base = float(np.mean(prevalences)) if prevalences else None
    return {
        "roc": svg_plots.curve_plot(
            "roc",
            "ROC curves",
            roc,
            x_label="false positive rate",
            y_label="true positive rate",
            reference=((0.0, 0.0), (1.0, 1.0)),
        )
        if roc
        else None,
        "pr": svg_plots.curve_plot(
            "pr",
            "Precision-recall curves",
            pr,
            x_label="recall",
            y_label="precision",
            # A random ranking's precision is the prevalence at every recall.
            reference=((0.0, base), (1.0, base)) if base is not None else None,
            legend_bottom=True,
        )
        if pr
        else None,
        "reliability": svg_plots.reliability_plot("Reliability diagram", rel) if rel else None,
        "histograms": hists,
        "positive": positive,
        "negative": negative,
    }


def _row_links(name: str, report: dict[str, Any]) -> dict[int, dict[str, str]]:
    """Per metric row: where its detector name and its n lead in the instance table."""
    out: dict[int, dict[str, str]] = {}
    field = report["slice_field"]
    for i, row in enumerate(report["rows"]):
        slices: tuple[SliceCondition, ...] = ()
        if field and row["slice"] not in (None, MACRO, MISSING_SLICE):
            slices = (SliceCondition(field=field, value=row["slice"]),)
        flt = InstanceFilter(score_detector=row["detector"], slices=slices)
        out[i] = {"detector": benchmark_url(name, InstanceFilter(score_detector=row["detector"]))}
        out[i]["n"] = benchmark_url(name, flt)
    return out


def _judge_links(name: str, judges: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {
        j["judge"]: {
            "pairs": benchmark_url(name, InstanceFilter(judge=j["judge"])),
            "flips": benchmark_url(name, InstanceFilter(judge=j["judge"], flip=FlipState.yes)),
            "retained_nonflip": benchmark_url(
                name, InstanceFilter(judge=j["judge"], flip=FlipState.no)
            ),
        }
        for j in judges
    }


@router.get("/benchmarks/{name}/metrics", response_class=HTMLResponse)
def metrics_page(
    request: Request,
    name: str,
    store: StoreDep,
    cache: ReadCache,
    label: LabelParam = None,
    slice: SliceParam = None,
    detector: DetectorParam = None,
    resamples: ResamplesParam = DEFAULT_RESAMPLES,
    seed: SeedParam = 0,
    labels: LabelsParam = "original",
    k: ResolveKParam = 2,
) -> HTMLResponse:
    """Metric matrix with intervals, judge summary and SVG plots for one label set."""
    chosen = non_blank(detector)
    with transaction(store.factory) as session:
        facets = describe_benchmark(session, name, cache)
        label_name = default_label(facets, label)
        report = metrics_report(
            session,
            name,
            label_name,
            chosen or None,
            slice_field=slice,
            resamples=resamples,
            seed=seed,
            labels=labels,
            k=k,
        )
        plotted = list(dict.fromkeys(r["detector"] for r in report["rows"]))
        plots = plot_data(session, name, label_name, plotted, labels, k)
    context = {
        "name": name,
        "facets": facets,
        "report": report,
        "label": label_name,
        "slice_field": slice,
        "chosen": chosen,
        "resamples": resamples,
        "seed": seed,
        "labels": labels,
        "label_modes": LABEL_MODES,
        "k": k,
        "plots": plots,
        "columns": METRIC_COLUMNS,
        "row_links": _row_links(name, report),
        "judge_links": _judge_links(name, report["judges"]),
    }
    return render(request, "metrics.html", context, fragment="_metrics_results.html")


@api_router.get("/benchmarks/{name}/metrics")
def api_metrics(
    name: str,
    store: StoreDep,
    cache: ReadCache,
    label: LabelParam = None,
    slice: SliceParam = None,
    detector: DetectorParam = None,
    resamples: ResamplesParam = DEFAULT_RESAMPLES,
    seed: SeedParam = 0,
    labels: LabelsParam = "original",
    k: ResolveKParam = 2,
) -> dict[str, Any]:
    """The metric matrix and judge summaries (the dict of ``appellate metrics --json``)."""
    with transaction(store.factory) as session:
        facets = describe_benchmark(session, name, cache)
        return metrics_report(
            session,
            name,
            default_label(facets, label),
            non_blank(detector) or None,
            slice_field=slice,
            resamples=resamples,
            seed=seed,
            labels=labels,
            k=k,
        )
