"""The probes page: probes and baselines with their data, fold choices and layer curves; forms."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from markupsafe import Markup
from sqlalchemy import select
from starlette.responses import HTMLResponse, Response

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.lie_jobs import BUILD_DATASET_JOB, BUILDERS
from app.services import jobs
from app.services.benchmarks import get_benchmark
from app.services.language_models import get_language_model, list_language_models
from app.services.lie_variants import LIE_VARIANTS, lie_extract_spec
from app.services.metrics import get_detector
from app.services.probe_store import list_probes
from app.tables import Benchmark, Detector
from app.web.deps import StoreDep
from app.web.jobs_pages import redirect_after_post
from app.web.svg_plots import layer_plot
from app.web.templating import render

router = APIRouter(include_in_schema=False)

FIT_PROBE_JOB, FIT_LIE_PROBE_JOB, APPLY_PROBE_JOB = "fit_probe", "fit_lie_probe", "apply_probe"


def _curve(detector: Detector) -> Markup | None:
    """Validation AUROC by layer (lie probes) or each fold's best inner Brier by layer (flip)."""
    d = detector.details or {}
    layers = d.get("layers") or []
    if d.get("validation_auroc") and layers:
        return layer_plot(
            "layer-curve", f"validation AUROC by layer: {detector.name}", layers,
            [("validation AUROC", d["validation_auroc"])],
            y_label="validation AUROC", marked=d.get("layer"),
        )  # fmt: skip
    folds = [f for f in d.get("folds", []) if f.get("inner_brier")]
    if folds and layers:
        series = [(f"fold {f['fold']}", [min(row) for row in f["inner_brier"]]) for f in folds]
        return layer_plot(
            "layer-curve", f"inner-fold Brier by layer: {detector.name}", layers, series,
            y_label="best inner Brier",
        )  # fmt: skip
    return None


def _card(detector: Detector) -> dict[str, Any]:
    d = detector.details or {}
    bench = d.get("benchmark") or d.get("source_benchmark")
    label = d.get("label") or (f"flip:{d['judge']}" if d.get("judge") else None)
    return {
        "name": detector.name,
        "kind": detector.kind,
        "details": d,
        "benchmark": bench,
        "label": label,
        "curve": _curve(detector),
        "frozen": bool(d.get("artifact")),
    }


@router.get("/probes", response_class=HTMLResponse)
def probes_page(request: Request, store: StoreDep) -> HTMLResponse:
    """Probes and baselines, newest fits first, with the fit and apply forms."""
    with transaction(store.factory) as session:
        cards = [_card(d) for d in list_probes(session)]
        benchmarks = list(session.scalars(select(Benchmark).order_by(Benchmark.name)))
        judges = list(
            session.scalars(
                select(Detector.name).where(Detector.kind == "judge").order_by(Detector.name)
            )
        )
        models = [m.name for m in list_language_models(session)]
    context = {
        "cards": cards,
        "benchmarks": benchmarks,
        "judges": judges,
        "models": models,
        "variants": LIE_VARIANTS,
        "frozen": [c["name"] for c in cards if c["frozen"]],
        "builders": list(BUILDERS),
    }
    return render(request, "probes.html", context)


def _queue(
    request: Request,
    store: StoreDep,
    kind: str,
    params: dict[str, Any],
    *,
    benchmark: str | None = None,
    detector: str | None = None,
    model: str | None = None,
) -> Response:
    """Check that the named benchmark, detector and model exist, queue the job, go to its page."""
    with transaction(store.write_factory) as session:
        if benchmark is not None:
            get_benchmark(session, benchmark)
        if detector is not None:
            get_detector(session, detector)
        if model is not None:
            get_language_model(session, model)
        job_id = jobs.enqueue(session, kind, params).id
    return redirect_after_post(request, f"/jobs/{job_id}")


@router.post("/probes/fit")
def fit_flip(
    request: Request,
    store: StoreDep,
    benchmark: Annotated[str, Form()],
    judge: Annotated[str, Form()],
) -> Response:
    """Queue the flip probe of a judge on a benchmark (with baselines and a frozen copy)."""
    params = {"benchmark": benchmark, "judge": judge}
    return _queue(request, store, FIT_PROBE_JOB, params, benchmark=benchmark, detector=judge)


@router.post("/probes/fit-lie")
def fit_lie(
    request: Request,
    store: StoreDep,
    benchmark: Annotated[str, Form()],
    model: Annotated[str, Form()],
    name: Annotated[str, Form(min_length=1, max_length=200)],
    variant: Annotated[str, Form()] = "lie",
    layers: Annotated[str, Form()] = "",
) -> Response:
    """Queue a lie-detector probe fit (captures the training activations first)."""
    try:
        wanted = [int(x) for x in layers.split(",") if x.strip()] or None
    except ValueError:
        raise InvalidInput("comma-separated layer numbers", field="layers") from None
    spec = lie_extract_spec(variant, model, wanted)
    params = {"benchmark": benchmark, "name": name, "extract": spec}
    return _queue(request, store, FIT_LIE_PROBE_JOB, params, benchmark=benchmark, model=model)


@router.post("/probes/datasets")
def build_datasets(request: Request, store: StoreDep, builder: Annotated[str, Form()]) -> Response:
    """Queue one of the lie-detector dataset builders (bundled data, default options)."""
    if builder not in BUILDERS:
        raise InvalidInput(f"must be one of {', '.join(BUILDERS)}", field="builder")
    return _queue(request, store, BUILD_DATASET_JOB, {"builder": builder})


@router.post("/probes/apply")
def apply_probe(
    request: Request,
    store: StoreDep,
    probe: Annotated[str, Form()],
    benchmark: Annotated[str, Form()],
) -> Response:
    """Queue scoring a benchmark with a frozen probe."""
    params = {"probe": probe, "benchmark": benchmark}
    return _queue(request, store, APPLY_PROBE_JOB, params, benchmark=benchmark, detector=probe)
