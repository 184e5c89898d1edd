"""The web application: ``create_app(settings)`` wires the store, templates, pages and API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.services.cache import VersionedCache
from app.settings import Settings
from app.store import Store
from app.web import (
    account_pages,
    api,
    disagreement_pages,
    docs_pages,
    health,
    jobs_pages,
    metrics_pages,
    pages,
    probes_pages,
    report_pages,
    review_pages,
)
from app.web.auth import RequireReviewer
from app.web.errors import install_error_handlers
from app.web.templating import STATIC_DIR, make_templates

DESCRIPTION = """Read access to benchmarks, their instances, label histories, judge verdicts in
both presentation orders and detector scores. The instance list takes the same filters as the
benchmark page; every filter is a query parameter."""


def create_app(settings: Settings) -> FastAPI:
    """Build the application for ``settings``.

    The store opens (and migrates) once at startup and its connections are released at
    shutdown; routes share one memo of facets and filtered counts.

    Parameters
    ----------
    settings : Settings
        Database URL, data directory and page size.

    Returns
    -------
    FastAPI

    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = Store.open(settings)
        app.state.store = store
        try:
            yield
        finally:
            store.close()

    # FastAPI's own /docs loads Swagger UI from a CDN and, like /openapi.json, answers without
    # sign-in: docs_pages serves both from the vendored assets, to reviewers.
    app = FastAPI(
        title="Appellate",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.settings = settings
    app.state.templates = make_templates()
    app.state.read_cache = VersionedCache()
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    # The dashboard shows labels and detector outputs: reviewers and admins read it; annotators
    # work in review queues only (where blind mode hides both). Mutations check CSRF too.
    for router in (
        pages.router,
        metrics_pages.router,
        metrics_pages.api_router,
        disagreement_pages.router,
        disagreement_pages.api_router,
        jobs_pages.router,
        probes_pages.router,
        jobs_pages.api_router,
        api.router,
        report_pages.router,
        docs_pages.router,
    ):
        app.include_router(router, dependencies=[RequireReviewer])
    app.include_router(account_pages.router)
    # Review routes check their own roles: annotators work here.
    app.include_router(review_pages.router)
    app.include_router(review_pages.api_router)
    app.include_router(health.router)
    install_error_handlers(app)
    return app


def app_from_environment() -> FastAPI:
    """An app configured from ``APPELLATE_*`` variables, for ``uvicorn --factory``.

    Several uvicorn worker processes need an import string instead of an app object:
    ``uvicorn --factory app.main:app_from_environment --workers 2``.
    """
    return create_app(Settings())
