"""The probes page: probes and baselines with their data, fold choices and layer curves; forms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Form, Request
from markupsafe import Markup
from sqlalchemy.orm import Session
from starlette.responses import HTMLResponse, Response

from app.db import transaction
from app.errors import InvalidInput
from app.services.evidence import probe_views
from app.services.evidence.lie_variants import LIE_VARIANTS, lie_extract_spec
from app.services.evidence.probe_views import LayerCurve
from app.services.jobs.build_dataset import BUILDER_NAMES, queue_dataset_build
from app.services.jobs.probes import (
    APPLY_PROBE_JOB,
    FIT_LIE_PROBE_JOB,
    FIT_PROBE_JOB,
    queue_probe_job,
)
from app.services.metrics.svg_plots import layer_plot
from app.tables import Job
from app.web.deps import FormText, StoreDep
from app.web.responses import redirect_after_post
from app.web.routers import page_router
from app.web.templating import render

router = page_router()


def _plot(curve: LayerCurve | None) -> Markup | None:
    if curve is None:
        return None
    return layer_plot(
        "layer-curve", curve.title, curve.layers, curve.series,
        y_label=curve.y_label, marked=curve.marked,
    )  # fmt: skip


@router.get("/probes", response_class=HTMLResponse)
def probes_page(request: Request, store: StoreDep) -> HTMLResponse:
    """Probes and baselines, newest fits first, with the fit and apply forms."""
    with transaction(store.factory) as session:
        page = probe_views.probes_page(session)
    context = {
        "cards": [{**vars(card), "curve": _plot(card.curve)} for card in page.cards],
        "benchmarks": page.benchmarks,
        "judges": page.judges,
        "models": page.models,
        "variants": LIE_VARIANTS,
        "frozen": page.frozen,
        "builders": list(BUILDER_NAMES),
    }
    return render(request, "probes.html", context)


def _queue(request: Request, store: StoreDep, enqueue: Callable[[Session], Job]) -> Response:
    """Queue a job in one transaction, then send the browser to its page."""
    with transaction(store.write_factory) as session:
        job = enqueue(session)
    return redirect_after_post(request, f"/jobs/{job.id}")


@router.post("/probes/fit")
def fit_flip(request: Request, store: StoreDep, benchmark: FormText, judge: FormText) -> Response:
    """Queue the flip probe of a judge on a benchmark (with baselines and a frozen copy)."""
    params = {"benchmark": benchmark, "judge": judge}
    return _queue(
        request,
        store,
        lambda s: queue_probe_job(s, FIT_PROBE_JOB, params, benchmark=benchmark, detector=judge),
    )


@router.post("/probes/fit-lie")
def fit_lie(
    request: Request,
    store: StoreDep,
    benchmark: FormText,
    model: FormText,
    name: Annotated[str, Form(min_length=1, max_length=200)],
    variant: FormText = "lie",
    layers: FormText = "",
) -> Response:
    """Queue a lie-detector probe fit (captures the training activations first)."""
    try:
        wanted = [int(x) for x in layers.split(",") if x.strip()] or None
    except ValueError:
        raise InvalidInput("comma-separated layer numbers", field="layers") from None
    spec = lie_extract_spec(variant, model, wanted)
    params = {"benchmark": benchmark, "name": name, "extract": spec}
    return _queue(
        request,
        store,
        lambda s: queue_probe_job(s, FIT_LIE_PROBE_JOB, params, benchmark=benchmark, model=model),
    )


@router.post("/probes/datasets")
def build_datasets(request: Request, store: StoreDep, builder: FormText) -> Response:
    """Queue one of the lie-detector dataset builders (bundled data, default options)."""
    return _queue(request, store, lambda s: queue_dataset_build(s, builder))


@router.post("/probes/apply")
def apply_probe(
    request: Request, store: StoreDep, probe: FormText, benchmark: FormText
) -> Response:
    """Queue scoring a benchmark with a frozen probe."""
    params = {"probe": probe, "benchmark": benchmark}
    return _queue(
        request,
        store,
        lambda s: queue_probe_job(s, APPLY_PROBE_JOB, params, benchmark=benchmark, detector=probe),
    )
