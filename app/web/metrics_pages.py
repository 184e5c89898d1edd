"""Metric matrix page and its JSON twin.

Thin routes: one :class:`~app.services.metrics.metrics_query.MetricsQuery` from the query string;
its numbers and figures from :mod:`app.services.metrics.metric_results` (stored once per data
version, computed here for a small benchmark, by a ``compute_metrics`` job for a big one), the
figures drawn by :func:`app.services.metrics.svg_plots.metrics_figures`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Query, Request
from markupsafe import Markup
from starlette.responses import HTMLResponse

from app.db import transaction
from app.services.evidence.labelled_items import LABEL_MODES, MISSING_SLICE, LabelMode
from app.services.jobs import queue as job_queue
from app.services.jobs.metrics_view import metrics_view
from app.services.metrics import svg_plots
from app.services.metrics.answer_metrics import ANSWERS_REPORT
from app.services.metrics.metric_matrix import MACRO, MATRIX_METRICS
from app.services.metrics.metric_results import MetricsResult
from app.services.metrics.metrics_query import MetricsQuery
from app.services.metrics.rankers import RANKERS, ranker_summary
from app.services.table.facets import BenchmarkFacets
from app.services.table.instance_filter import FlipState, InstanceFilter, SliceCondition
from app.stats.registry import ANSWER_METRICS, Metric, Need
from app.tables import Job
from app.web.benchmark_params import DetectorParam, LabelParam, default_label, non_blank
from app.web.deps import ReadCache, StoreDep
from app.web.error_docs import MAX_RESAMPLES, invalid
from app.web.filters import Blank
from app.web.metrics_schema import MetricsReportModel
from app.web.params import DbCount
from app.web.routers import json_router, page_router
from app.web.templating import render
from app.web.urls import benchmark_url

router = page_router()
api_router = json_router("metrics")

DEFAULT_RESAMPLES = 2000

SliceParam = Annotated[str | None, Blank, Query(description="Payload field defining slices.")]
ResamplesParam = Annotated[
    int,
    Query(ge=1, le=MAX_RESAMPLES, description="Group-bootstrap resamples (at most 10,000)."),
]
SeedParam = Annotated[DbCount, Query(description="Bootstrap seed.")]
LabelsParam = Annotated[
    LabelMode,
    Query(description="`original` labels, or `resolved` ones (adjudication, else k votes)."),
]
ResolveKParam = Annotated[
    DbCount, Query(ge=1, description="Resolved labels: agreeing voters needed to override.")
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


def _figures(result: MetricsResult) -> dict[str, Any] | None:
    """The stored figures as Markup (drawn now when the result has plot data but none)."""
    figures = result.figures
    if figures is None:
        plots = result.plots
        if plots is None:
            return None
        figures = svg_plots.metrics_figures(plots)

    def safe(svg: str | None) -> Markup | None:
        # Only this module's drawing (every data text escaped) writes the figures column.
        return None if svg is None else Markup(svg)

    return {
        "roc": safe(figures["roc"]),
        "pr": safe(figures["pr"]),
        "reliability": safe(figures["reliability"]),
        "histograms": [(name, safe(svg)) for name, svg in figures["histograms"]],
        "positive": figures["positive"],
        "negative": figures["negative"],
    }


@dataclass(frozen=True)
class Pending:
    """A result being computed by a job: the job's state, and the stale version shown meanwhile.

    ``stale_version`` is the data version of the stale numbers shown (``None``: none shown).
    """

    job_id: int
    status: str
    done: int
    total: int | None
    error: str | None
    stale_version: int | None

    @property
    def percent(self) -> int | None:
        """Progress in whole percent, when the job knows its total."""
        return int(100 * self.done / self.total) if self.total else None

    @property
    def active(self) -> bool:
        """Whether the job is still queued or running (the page keeps polling)."""
        return self.status in job_queue.ACTIVE


def _pending(job: Job, stale: MetricsResult | None) -> Pending:
    return Pending(
        job.id,
        job.status,
        job.progress_done,
        job.progress_total,
        job.error,
        None if stale is None else stale.data_version,
    )


@dataclass(frozen=True)
class LinkedRow:
    """A report row with where its detector name and its n lead in the instance table."""

    row: dict[str, Any]
    detector_url: str
    n_url: str


def _linked(name: str, field: str | None, row: dict[str, Any], scored: bool) -> LinkedRow:
    """Where a row's detector and n lead: its scored items (of its slice) in the table.

    A model's answers are no scores (``scored`` False, an answer report): the table of its
    slice then, not a score filter the table refuses (every such link answered 422).
    """
    slices: tuple[SliceCondition, ...] = ()
    if field and row["slice"] not in (None, MACRO, MISSING_SLICE):
        slices = (SliceCondition(field=field, value=row["slice"]),)
    by = row["detector"] if scored else None
    detector = InstanceFilter(score_detector=by)
    n = InstanceFilter(score_detector=by, slices=slices)
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
    scored = report.get("kind") != ANSWERS_REPORT
    linked = [_linked(name, field, row, scored) for row in report["rows"]]
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


def savings_url(name: str, judge: str) -> str:
    """The savings page of ``judge`` on benchmark ``name``."""
    return f"/benchmarks/{quote(name, safe='')}/savings?judge={quote(judge, safe='')}"


def _judge_links(name: str, judges: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {
        j["judge"]: {
            "pairs": benchmark_url(name, InstanceFilter(judge=j["judge"])),
            "flips": benchmark_url(name, InstanceFilter(judge=j["judge"], flip=FlipState.yes)),
            "retained_nonflip": benchmark_url(
                name, InstanceFilter(judge=j["judge"], flip=FlipState.no)
            ),
            "savings": savings_url(name, j["judge"]),
        }
        for j in judges
    }


@router.get("/benchmarks/{name}/metrics", response_class=HTMLResponse)
def metrics_page(
    request: Request, name: str, store: StoreDep, cache: ReadCache, params: MetricsParamsDep
) -> HTMLResponse:
    """Metric matrix with intervals, judge summary and SVG plots for one label set.

    Served from the stored result of the request when there is one. Otherwise a small
    benchmark is computed here (and stored); a big one is left to a ``compute_metrics`` job,
    and the page shows the previous data version's numbers, marked stale, and polls.
    """
    view = metrics_view(
        store.factory,
        store.write_factory,
        name,
        partial(params.query, name),
        limit=store.settings.metrics_inline_items,
        cache=cache,
        draw=svg_plots.metrics_figures,
    )
    facets, query, result = view.facets, view.query, view.result
    pending = None if view.job is None else _pending(view.job, result)
    url = request.url
    report = None if result is None else result.report
    matrix, pivot = _matrix(name, report) if report is not None else ([], None)
    rankers = None
    if any(facets.summary.kind in r.kinds for r in RANKERS.values()):
        # Only a benchmark the rankers rank can hold their summary (one more lookup).
        with transaction(store.factory) as session:
            rankers = ranker_summary(session, name)
    context = {
        "rankers": rankers,
        "name": name,
        "facets": facets,
        "report": report,
        "pending": pending,
        "poll_url": f"{url.path}?{url.query}" if url.query else url.path,
        "label": query.label,
        "slice_field": query.slice_field,
        "chosen": params.detectors,
        "resamples": query.resamples,
        "seed": query.seed,
        "labels": query.labels,
        "label_modes": LABEL_MODES,
        "k": query.k,
        "plots": None if result is None else _figures(result),
        "matrix": matrix,
        "pivot": pivot,
        "judge_links": {} if report is None else _judge_links(name, report["judges"]),
        "columns": [] if report is None else _columns(report),
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
    responses=invalid(
        "a label set that is not binary without `positive` naming its positive class",
        "a `positive` value the label set does not have",
        "a `slice` that is not a payload field name",
        "`resamples` above 10,000 (one request computes its bootstrap inline)",
    ),
)
def api_metrics(
    name: str, store: StoreDep, cache: ReadCache, params: MetricsParamsDep
) -> dict[str, Any]:
    """The metric matrix and judge summaries (the dict of ``appellate metrics --json``).

    Served from the stored result when there is one, else computed here and stored.
    """
    build = partial(params.query, name)
    view = metrics_view(store.factory, store.write_factory, name, build, limit=None, cache=cache)
    assert view.result is not None  # computed here whatever the size
    return view.result.report
