"""Metric matrix and confident-disagreement pages, their CSV export and JSON twins.

Thin routes: the numbers come from :mod:`app.services.metrics`,
:mod:`app.services.judge_summary` (via ``metrics_report``) and
:mod:`app.services.disagreements`; the plots from :mod:`app.stats.calibration` drawn by
:mod:`app.web.svg_plots`. Every choice lives in the query string.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy.orm import Session
from starlette.responses import HTMLResponse, Response

from app.db import transaction
from app.services.disagreements import MODES, disagreements
from app.services.facets import BenchmarkFacets, describe_benchmark
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
from app.web.deps import ReadCache, StoreDep
from app.web.filters import Blank
from app.web.templating import render
from app.web.urls import benchmark_url, path_segment

router = APIRouter(include_in_schema=False)
api_router = APIRouter(prefix="/api", tags=["metrics"])

DEFAULT_RESAMPLES = 2000
DEFAULT_LIMIT = 1000

LabelParam = Annotated[str | None, Blank, Query(description="Label set; default `reference`.")]
SliceParam = Annotated[str | None, Blank, Query(description="Payload field defining slices.")]
DetectorParam = Annotated[
    list[str] | None, Query(description="Detector name (repeatable); default all scored.")
]
ResamplesParam = Annotated[int, Query(ge=1, le=100_000, description="Group-bootstrap resamples.")]
SeedParam = Annotated[int, Query(ge=0, description="Bootstrap seed.")]
LabelsParam = Annotated[
    LabelMode,
    Query(description="`original` labels, or `resolved` ones (adjudication, else k votes)."),
]
ResolveKParam = Annotated[
    int, Query(ge=1, description="Resolved labels: agreeing voters needed to override.")
]
ModeParam = Annotated[str, Query(description=f"One of {', '.join(MODES)}.")]
ConfParam = Annotated[
    float | None, Blank, Query(ge=0.0, le=1.0, description="Cut on P(other class).")
]
KParam = Annotated[int | None, Blank, Query(ge=1, description="Consensus quorum.")]
LimitParam = Annotated[int, Query(ge=0, le=1_000_000, description="Most items listed.")]
JudgeParam = Annotated[
    str | None, Blank, Query(description="Judge (detector-vs-judge mode; ignored otherwise).")
]

METRIC_COLUMNS: tuple[tuple[str, str], ...] = (
    ("auroc", "AUROC"),
    ("auprc", "AUPRC"),
    ("brier", "Brier"),
    ("choice_matched_auroc", "Choice-matched AUROC"),
)


def _default_label(facets: BenchmarkFacets, label: str | None) -> str:
    """``label``, else ``reference`` when the benchmark has it, else its first label set."""
    if label:
        return label
    names = [ls.name for ls in facets.label_sets]
    return "reference" if "reference" in names or not names else names[0]


def _clean(rows: list[str] | None) -> list[str]:
    return [r for r in (rows or []) if r.strip()]


def metrics_url(name: str, **params: Any) -> str:
    """Path of the metrics page with ``params`` (``None`` and empty values left out)."""
    return _with_query(f"/benchmarks/{path_segment(name)}/metrics", params)


def disagreements_url(name: str, csv_export: bool = False, **params: Any) -> str:
    """Path of the disagreements page (or its CSV export) with ``params``."""
    suffix = "disagreements.csv" if csv_export else "disagreements"
    return _with_query(f"/benchmarks/{path_segment(name)}/{suffix}", params)


def _with_query(path: str, params: dict[str, Any]) -> str:
    from urllib.parse import urlencode

    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        if value is None or value == "" or value == []:
            continue
        for v in value if isinstance(value, list) else [value]:
            pairs.append((key, str(v)))
    return path + ("?" + urlencode(pairs) if pairs else "")


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
    chosen = _clean(detector)
    with transaction(store.factory) as session:
        facets = describe_benchmark(session, name, cache)
        label_name = _default_label(facets, label)
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
        "fmt_ci": fmt_ci,
        "disagreements_url": disagreements_url,
        "metrics_url": metrics_url,
    }
    return render(request, "metrics.html", context, fragment="_metrics_results.html")


def fmt_ci(ci: list[float] | None, digits: int = 3) -> str:
    """``[low, high]`` as ``low-high`` (en dash) for the muted interval; ``""`` when absent."""
    if not ci:
        return ""
    low, high = ci
    if not (math.isfinite(low) and math.isfinite(high)):
        return ""
    return f"{low:.{digits}f}\u2013{high:.{digits}f}"


@dataclass(frozen=True)
class DisagreementQuery:
    """The query string of the disagreements page, its CSV export and its JSON twin.

    ``detectors`` holds the non-blank ``detector`` values; ``label`` is ``None`` when not
    given (see :func:`_default_label`).
    """

    detectors: list[str]
    label: str | None
    mode: str
    min_confidence: float | None
    k: int | None
    limit: int
    judge: str | None


def disagreement_query(
    detector: DetectorParam = None,
    label: LabelParam = None,
    mode: ModeParam = "threshold",
    min_confidence: ConfParam = None,
    k: KParam = None,
    limit: LimitParam = DEFAULT_LIMIT,
    judge: JudgeParam = None,
) -> DisagreementQuery:
    """The shared disagreements parameters, as one dependency."""
    return DisagreementQuery(_clean(detector), label, mode, min_confidence, k, limit, judge)


DisagreementParams = Annotated[DisagreementQuery, Depends(disagreement_query)]


def _disagreement_list(
    session: Session, name: str, query: DisagreementQuery, label: str
) -> dict[str, Any]:
    """The service's list as a dict, against label set ``label`` (the query's, defaulted).

    ``judge`` is passed on in detector-vs-judge mode only, so a judge left in the URL does not
    break the other modes.
    """
    result = disagreements(
        session,
        name,
        query.detectors,
        label=label,
        mode=query.mode,
        min_confidence=query.min_confidence,
        k=query.k,
        limit=query.limit,
        judge=query.judge if query.mode == "detector-vs-judge" else None,
    )
    return result.as_dict()


@router.get("/benchmarks/{name}/disagreements", response_class=HTMLResponse)
def disagreements_page(
    request: Request, name: str, store: StoreDep, cache: ReadCache, query: DisagreementParams
) -> HTMLResponse:
    """Ranked confident disagreements with links to the items, and a CSV link."""
    chosen = query.detectors
    with transaction(store.factory) as session:
        facets = describe_benchmark(session, name, cache)
        label_name = _default_label(facets, query.label)
        ready = chosen and (query.mode != "detector-vs-judge" or query.judge)
        result = _disagreement_list(session, name, query, label_name) if ready else None
    params = {
        "detector": chosen,
        "label": label_name,
        "mode": query.mode,
        "min_confidence": query.min_confidence,
        "k": query.k,
        "limit": query.limit if query.limit != DEFAULT_LIMIT else None,
        "judge": query.judge,
    }
    context = {
        "name": name,
        "facets": facets,
        "result": result,
        "label": label_name,
        "chosen": chosen,
        "mode": query.mode,
        "modes": MODES,
        "min_confidence": query.min_confidence,
        "k": query.k,
        "limit": query.limit,
        "judge": query.judge,
        "csv_url": disagreements_url(name, csv_export=True, **params),
        "metrics_url": metrics_url,
    }
    return render(request, "disagreements.html", context, fragment="_disagreements_results.html")


CSV_COLUMNS = ("rank", "external_id", "label", "score", "confidence", "reason")


@router.get("/benchmarks/{name}/disagreements.csv")
def disagreements_csv(
    name: str, store: StoreDep, cache: ReadCache, query: DisagreementParams
) -> Response:
    """The same ranked list as the page, as CSV (one row per item, full-precision numbers)."""
    with transaction(store.factory) as session:
        facets = describe_benchmark(session, name, cache)
        result = _disagreement_list(session, name, query, _default_label(facets, query.label))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for rank, item in enumerate(result["items"], start=1):
        writer.writerow(
            [
                rank,
                item["external_id"],
                "" if item["label"] is None else item["label"],
                "" if item["score"] is None else repr(item["score"]),
                "" if item["confidence"] is None else repr(item["confidence"]),
                item["reason"],
            ]
        )
    # The filename is ASCII-safe: benchmark names may hold anything.
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "benchmark"
    return Response(
        buf.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="{safe}-disagreements-{query.mode}.csv"'
        },
    )


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
            _default_label(facets, label),
            _clean(detector) or None,
            slice_field=slice,
            resamples=resamples,
            seed=seed,
            labels=labels,
            k=k,
        )


@api_router.get("/benchmarks/{name}/disagreements")
def api_disagreements(
    name: str, store: StoreDep, cache: ReadCache, query: DisagreementParams
) -> dict[str, Any]:
    """The ranked list (the dict of ``appellate disagreements --json``)."""
    with transaction(store.factory) as session:
        facets = describe_benchmark(session, name, cache)
        return _disagreement_list(session, name, query, _default_label(facets, query.label))
