"""The printable defect report of a benchmark and the export downloads (data and changelog).

Reviewers only (the router is included with the reviewer role in ``app.main``): the report
shows labels, reasons and detector metrics, which annotators in a blind queue must not see.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Query, Request
from starlette.background import BackgroundTask
from starlette.responses import FileResponse, HTMLResponse

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.export.benchmark import (
    FORMATS,
    LABEL_CHOICES,
    ExportFormat,
    LabelChoice,
    changelog_path,
    export_benchmark,
)
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labels import label_names
from app.services.review.defect_report import defect_report
from app.services.table.filter_query import parse_filter_query
from app.store import Store
from app.web.deps import StoreDep
from app.web.error_docs import MAX_RESAMPLES, PAGE_RESAMPLES
from app.web.filters import Blank
from app.web.routers import page_router
from app.web.templating import render
from app.web.urls import path_segment

router = page_router()

MEDIA_TYPES = {
    "jsonl": "application/x-ndjson",
    "csv": "text/csv; charset=utf-8",
    "parquet": "application/vnd.apache.parquet",
}

LabelParam = Annotated[
    str | None, Blank, Query(description="Label set to report on; default every label set.")
]
KParam = Annotated[
    int, Query(ge=1, le=1000, description="Agreeing voters needed to override the original.")
]
ResamplesParam = Annotated[
    int, Query(ge=1, le=MAX_RESAMPLES, description="Bootstrap resamples (at most 10,000).")
]
# Aliases keep the URL's short names without shadowing Python's format() and filter().
FormatParam = Annotated[ExportFormat, Query(alias="format", description="jsonl, csv or parquet.")]
LabelsParam = Annotated[LabelChoice, Query(description="`resolved` or `original` label values.")]
FilterParam = Annotated[
    str,
    Query(
        alias="filter",
        max_length=4000,
        description="The instance table's query string (or its URL): export those rows only.",
    ),
]


def report_url(name: str) -> str:
    """Path of a benchmark's defect report."""
    return f"/benchmarks/{path_segment(name)}/report"


def export_url(name: str) -> str:
    """Path of a benchmark's export download."""
    return f"/benchmarks/{path_segment(name)}/export"


@router.get("/benchmarks/{name}/report", response_class=HTMLResponse)
def report_page(
    request: Request,
    name: str,
    store: StoreDep,
    label: LabelParam = None,
    k: KParam = 2,
    resamples: ResamplesParam = PAGE_RESAMPLES,
) -> HTMLResponse:
    """Defect tags, relabelled items, metrics before and after review, and the export form."""
    with transaction(store.factory) as session:
        report = defect_report(session, name, k=k, label=label, resamples=resamples)
        all_labels = label_names(session, get_benchmark(session, name).id)
    context = {
        "name": report["benchmark"],
        "report": report,
        "all_labels": all_labels,
        "formats": FORMATS,
        "label_choices": LABEL_CHOICES,
        "report_url": report_url,
        "export_url": export_url,
    }
    return render(request, "report.html", context)


@dataclass(frozen=True)
class ExportQuery:
    """What an export download is of: format, label values, quorum and row filter."""

    fmt: ExportFormat
    labels: LabelChoice
    k: int
    query: str


async def export_query(
    fmt: FormatParam = "jsonl",
    labels: LabelsParam = "resolved",
    k: KParam = 2,
    query: FilterParam = "",
) -> ExportQuery:
    """The export's query parameters (shared by the data and the changelog download)."""
    return ExportQuery(fmt, labels, k, query)


ExportQueryDep = Annotated[ExportQuery, Depends(export_query)]


@router.get("/benchmarks/{name}/export")
def export_download(name: str, store: StoreDep, params: ExportQueryDep) -> FileResponse:
    """The benchmark (or the rows of ``filter``) as a JSONL, CSV or Parquet attachment."""
    return _download(store, name, params, changelog=False)


@router.get("/benchmarks/{name}/export/changelog.csv")
def changelog_download(name: str, store: StoreDep, params: ExportQueryDep) -> FileResponse:
    """The changelog CSV of the export with the same parameters, as an attachment."""
    return _download(store, name, params, changelog=True)


def _download(store: Store, name: str, params: ExportQuery, *, changelog: bool) -> FileResponse:
    fmt, labels, k, query = params.fmt, params.labels, params.k, params.query
    flt = None
    if query.strip():
        try:
            flt = parse_filter_query(query)
        except InvalidInput as exc:
            raise InvalidInput(exc.message, field="filter") from None
    tmp = Path(tempfile.mkdtemp(prefix="appellate-export-"))
    try:
        # The changelog is the export's own by-product, so a filtered or original-label
        # changelog lists exactly what the same export would.
        out = tmp / f"export.{fmt}"
        with transaction(store.factory) as session:
            export_benchmark(session, name, out, fmt=fmt, labels=labels, k=k, flt=flt)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    stem = f"{_file_safe(name)}-{labels}"
    path, filename, media_type = (
        (changelog_path(out), f"{stem}.changelog.csv", MEDIA_TYPES["csv"])
        if changelog
        else (out, f"{stem}.{fmt}", MEDIA_TYPES[fmt])
    )
    return FileResponse(
        path,
        media_type=media_type,
        filename=filename,
        headers={"X-Content-Type-Options": "nosniff"},
        # Runs after the body is sent, whether or not the client read all of it.
        background=BackgroundTask(shutil.rmtree, tmp, ignore_errors=True),
    )


def _file_safe(name: str) -> str:
    """``name`` as a download file name: anything but letters, digits, ``.``, ``_``, ``-`` -> _."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).strip(".") or "benchmark"
