"""The probes page: probes and baselines with their data, fold choices and layer curves; forms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from markupsafe import Markup
from starlette.responses import HTMLResponse, Response

from app.db import transaction
from app.services.evidence import probe_views
from app.services.evidence.lie_recipes import RECIPES
from app.services.evidence.lie_variants import LIE_VARIANTS, lie_extract_spec
from app.services.evidence.probe_views import LayerCurve
from app.services.jobs.apply_probe import ApplyParams
from app.services.jobs.build_dataset import BUILDER_NAMES, BuildDatasetParams
from app.services.jobs.extract import ExtractParams
from app.services.jobs.fit_lie_probe import FitLieParams
from app.services.jobs.fit_probe import FitFlipParams
from app.services.jobs.kind import JobParams
from app.services.jobs.probe_card import ProbeCardParams, report_cards
from app.services.metrics.svg_plots import layer_plot
from app.web.deps import StoreDep
from app.web.job_forms import FormData, FormError, submit_job_form
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


def _probes_page(
    request: Request,
    store: StoreDep,
    values: dict[str, str] | None = None,
    error: FormError | None = None,
) -> HTMLResponse:
    with transaction(store.factory) as session:
        page = probe_views.probes_page(session)
        table = report_cards(session)
    context = {
        "cards": [{**vars(card), "curve": _plot(card.curve)} for card in page.cards],
        "benchmarks": page.benchmarks,
        "judges": page.judges,
        "models": page.models,
        "variants": LIE_VARIANTS,
        "frozen": page.frozen,
        "lie_probes": page.lie_probes,
        "builders": list(BUILDER_NAMES),
        "recipes": list(RECIPES.values()),
        "report": table,
        "values": values or {},
        "form_error": error,
    }
    return render(request, "probes.html", context)


@router.get("/probes", response_class=HTMLResponse)
def probes_page(request: Request, store: StoreDep) -> HTMLResponse:
    """Probes and baselines, newest fits first, with the fit and apply forms."""
    return _probes_page(request, store)


def _submit(
    request: Request,
    store: StoreDep,
    form_id: str,
    params_type: type[JobParams],
    form: dict[str, str],
    data: Callable[[], dict[str, Any]] | None = None,
) -> Response:
    """Queue the form's job, or show the probes page with the error beside its field."""
    return submit_job_form(
        request,
        store,
        form_id,
        params_type,
        data or (lambda: params_type.parse_form(form)),
        lambda error: _probes_page(request, store, form, error),
    )


@router.post("/probes/fit")
def fit_flip(request: Request, store: StoreDep, form: FormData) -> Response:
    """Queue the flip probe of a judge on a benchmark (with baselines and a frozen copy)."""
    return _submit(request, store, "probe-fit", FitFlipParams, form)


def _lie_fit(form: dict[str, str]) -> dict[str, Any]:
    """The lie probe's parameters: its name and label, and the variant's capture spec."""
    layers = ExtractParams.parse_form({"layers": form.get("layers", "")})["layers"]
    spec = lie_extract_spec(form.get("variant", "lie"), form.get("model", ""), layers)
    return {**FitLieParams.parse_form(form), "extract": spec}


@router.post("/probes/fit-lie")
def fit_lie(request: Request, store: StoreDep, form: FormData) -> Response:
    """Queue a lie-detector probe fit (captures the training activations first)."""
    return _submit(request, store, "probe-fit-lie", FitLieParams, form, lambda: _lie_fit(form))


@router.post("/probes/datasets")
def build_datasets(request: Request, store: StoreDep, form: FormData) -> Response:
    """Queue one of the lie-detector dataset builders (bundled data, default options)."""
    return _submit(request, store, "probe-datasets", BuildDatasetParams, form)


@router.post("/probes/card")
def probe_card(request: Request, store: StoreDep, form: FormData) -> Response:
    """Queue a recipe's report card (fit, the five stress tests built with the model, scores)."""
    return _submit(request, store, "probe-card", ProbeCardParams, form)


@router.post("/probes/apply")
def apply_probe(request: Request, store: StoreDep, form: FormData) -> Response:
    """Queue scoring a benchmark with a frozen probe."""
    return _submit(request, store, "probe-apply", ApplyParams, form)
