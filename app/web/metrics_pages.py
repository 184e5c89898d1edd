"""Metric matrix page and its JSON twin.

Thin routes: one :class:`~app.services.metrics_query.MetricsQuery` from the query string, the
numbers and plot data from :func:`app.services.metrics.metrics_view` (one read of the labelled
items), the plots drawn by :mod:`app.web.svg_plots`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from markupsafe import Markup
from starlette.responses import HTMLResponse

from app.db import transaction
from app.services.answer_metrics import ANSWERS_REPORT
from app.services.facets import BenchmarkFacets, describe_benchmark
from app.services.instance_filter import FlipState, InstanceFilter, SliceCondition
from app.services.labelled_items import LABEL_MODES, MISSING_SLICE, LabelMode
from app.services.metric_matrix import MACRO, MATRIX_METRICS
from app.services.metrics import metrics_view, report_for
from app.services.metrics_plots import Curve, MetricsPlots
from app.services.metrics_query import MetricsQuery
from app.stats.registry import ANSWER_METRICS, Metric, Need
from app.web import svg_plots
from app.web.benchmark_params import DetectorParam, LabelParam, default_label, non_blank
from app.web.deps import ReadCache, StoreDep
from app.web.filters import Blank
from app.web.metrics_schema import MetricsReportModel
from app.web.routers import json_router, page_router
from app.web.templating import render
from app.web.urls import benchmark_url

router = page_router()
api_router = json_router("metrics")

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


@dataclass(frozen=True)
class MetricsParams:
    """The query string of the metrics page and its JSON twin.

    ``detectors`` holds the non-blank ``detector`` values; ``label`` is ``None`` when not
    given (the benchmark's default label set then applies).
    """

    label: str | None
    slice_field: str | None
    detectors: list[str]
    resamples: int
    seed: int
    labels: LabelMode
    k: int

    def query(self, name: str, facets: BenchmarkFacets) -> MetricsQuery:
        """The metrics request these parameters make on benchmark ``name``."""
        return MetricsQuery(
            name,
            default_label(facets, self.label),
            self.labels,
            self.k,
            detectors=tuple(self.detectors),
            slice_field=self.slice_field,
            resamples=self.resamples,
            seed=self.seed,
        )


async def metrics_params(
    label: LabelParam = None,
    slice: SliceParam = None,
    detector: DetectorParam = None,
    resamples: ResamplesParam = DEFAULT_RESAMPLES,
    seed: SeedParam = 0,
    labels: LabelsParam = "original",
    k: ResolveKParam = 2,
) -> MetricsParams:
    """The shared metrics parameters, as one dependency (``async``: it reads no store)."""
    return MetricsParams(label, slice, non_blank(detector), resamples, seed, labels, k)


MetricsParamsDep = Annotated[MetricsParams, Depends(metrics_params)]


def _curves(plot: list[Curve]) -> list[svg_plots.Series]:
    return [svg_plots.Series(c.detector, c.xs, c.ys) for c in plot]


def _curve_plot(
    kind: str,
    title: str,
    curves: list[Curve],
    axes: tuple[str, str],
    reference: tuple[tuple[float, float], tuple[float, float]] | None,
    **options: Any,
) -> Markup | None:
    """One plot of every detector's ``curves`` (``None`` when no detector has them)."""
    if not curves:
        return None
    x_label, y_label = axes
    return svg_plots.curve_plot(
        kind,
        title,
        _curves(curves),
        x_label=x_label,
        y_label=y_label,
        reference=reference,
        **options,
    )


def _draw(plots: MetricsPlots) -> dict[str, Any]:
    """The plot data as SVG, with the two class names.

    ``roc``, ``pr`` and ``reliability`` are Markup (``None`` when no detector has that plot),
    ``histograms`` a list of (detector, Markup).
    """
    base = plots.pr_baseline
    return {
        "roc": _curve_plot(
            "roc",
            "ROC curves",
            plots.roc,
            ("false positive rate", "true positive rate"),
            ((0.0, 0.0), (1.0, 1.0)),
        ),
        # A random ranking's precision is the prevalence at every recall.
        "pr": _curve_plot(
            "pr",
            "Precision-recall curves",
            plots.pr,
            ("recall", "precision"),
            ((0.0, base), (1.0, base)) if base is not None else None,
            legend_bottom=True,
        ),
        "reliability": svg_plots.reliability_plot("Reliability diagram", plots.reliability)
        if plots.reliability
        else None,
        "histograms": [
            (name, svg_plots.histogram_plot(name, counts, plots.positive, plots.negative))
            for name, counts in plots.histograms
        ],
        "positive": plots.positive,
        "negative": plots.negative,
    }


@dataclass(frozen=True)
class LinkedRow:
    """A report row with where its detector name and its n lead in the instance table."""

    row: dict[str, Any]
    detector_url: str
    n_url: str


def _linked(name: str, field: str | None, row: dict[str, Any]) -> LinkedRow:
    slices: tuple[SliceCondition, ...] = ()
    if field and row["slice"] not in (None, MACRO, MISSING_SLICE):
        slices = (SliceCondition(field=field, value=row["slice"]),)
    detector = InstanceFilter(score_detector=row["detector"])
    n = InstanceFilter(score_detector=row["detector"], slices=slices)
    return LinkedRow(row, benchmark_url(name, detector), benchmark_url(name, n))


@dataclass(frozen=True)
class Pivot:
    """The sliced rows as a detector x slice table: per detector, all items, each slice, macro.

    ``rows`` pairs each detector with its cells in column order: the all-items row, one row
    per slice of ``slices`` (``None`` where the report has none) and the macro-average row.
    """

    field: str
    slices: list[str]
    rows: list[tuple[str, list[LinkedRow | None]]]


def _matrix(name: str, report: dict[str, Any]) -> tuple[list[LinkedRow], Pivot | None]:
    """The rows of the detectors table (all items) and, with a slice field, the pivot."""
    field = report.get("slice_field")
    linked = [_linked(name, field, row) for row in report["rows"]]
    every = [r for r in linked if r.row["slice"] is None]
    if not field:
        return every, None
    slices = list(dict.fromkeys(
        r.row["slice"] for r in linked if r.row["slice"] not in (None, MACRO)
    ))  # fmt: skip
    columns: list[str | None] = [None, *slices, MACRO]
    by_detector: dict[str, dict[str | None, LinkedRow]] = {}
    for r in linked:
        by_detector.setdefault(r.row["detector"], {})[r.row["slice"]] = r
    rows = [(d, [cells.get(c) for c in columns]) for d, cells in by_detector.items()]
    return every, Pivot(field, slices, rows)


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
    request: Request, name: str, store: StoreDep, cache: ReadCache, params: MetricsParamsDep
) -> HTMLResponse:
    """Metric matrix with intervals, judge summary and SVG plots for one label set."""
    with transaction(store.factory) as session:
        facets = describe_benchmark(session, name, cache)
        query = params.query(name, facets)
        view = metrics_view(session, query)
    report = view.report
    matrix, pivot = _matrix(name, report)
    context = {
        "name": name,
        "facets": facets,
        "report": report,
        "label": query.label,
        "slice_field": query.slice_field,
        "chosen": params.detectors,
        "resamples": query.resamples,
        "seed": query.seed,
        "labels": query.labels,
        "label_modes": LABEL_MODES,
        "k": query.k,
        "plots": None if view.plots is None else _draw(view.plots),
        "matrix": matrix,
        "pivot": pivot,
        "judge_links": _judge_links(name, report["judges"]),
        "columns": _columns(report),
    }
    return render(request, "metrics.html", context, fragment="_metrics_results.html")


def _columns(report: dict[str, Any]) -> list[Metric]:
    """The metric columns of a report's table.

    Answer metrics for a report on models' answers; else the matrix's, with the top-k metrics
    of label-error rankers only when a row has one.
    """
    rows = report["rows"]
    if report.get("kind") == ANSWERS_REPORT:
        return [m for m in ANSWER_METRICS if any(m.name in r for r in rows)]
    return [
        m
        for m in MATRIX_METRICS
        if Need.RANKING not in m.needs or any(r[m.name] is not None for r in rows)
    ]


@api_router.get(
    "/benchmarks/{name}/metrics",
    response_model=MetricsReportModel,
    # Score reports and answer reports have different keys: each keeps exactly its own.
    response_model_exclude_unset=True,
)
def api_metrics(
    name: str, store: StoreDep, cache: ReadCache, params: MetricsParamsDep
) -> dict[str, Any]:
    """The metric matrix and judge summaries (the dict of ``appellate metrics --json``)."""
    with transaction(store.factory) as session:
        return report_for(session, params.query(name, describe_benchmark(session, name, cache)))
