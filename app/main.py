"""The web application: ``create_app(settings)`` wires the store, templates, pages and API."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment
from sqlalchemy import select

from app.db import transaction
from app.errors import AppellateError
from app.services.evidence.benchmarks import get_benchmark
from app.services.table.browse import benchmark_view
from app.services.table.facets import benchmark_facets, facets_kept, keep_facets, worth_keeping
from app.services.table.instance_filter import InstanceFilter
from app.settings import Settings
from app.sql.cache import VersionedCache
from app.store import Store
from app.tables import Benchmark
from app.web import (
    account_pages,
    api,
    disagreement_pages,
    docs_pages,
    health,
    jobs_pages,
    judge_pages,
    judge_people_pages,
    metrics_pages,
    pages,
    probes_pages,
    report_pages,
    review_pages,
    savings_pages,
    upload_pages,
)
from app.web.auth import RequireReviewer
from app.web.errors import install_error_handlers
from app.web.templating import STATIC_DIR, make_templates

DESCRIPTION = """Read access to benchmarks, their instances, label histories, judge verdicts in
both presentation orders and detector scores. The instance list takes the same filters as the
benchmark page; every filter is a query parameter."""


WARM_UP_JOIN_SECONDS = 10.0
"""How long shutdown waits for the warm-up to finish the benchmark it is on."""


def warm_up(
    store: Store, cache: VersionedCache, stop: threading.Event, env: Environment | None = None
) -> None:
    """Warm what the first requests need: compiled templates, each benchmark's first page.

    Runs in the background from start-up on. The first request for a benchmark would otherwise
    scan it for its facets (label values, judges, detectors, slices: 1.7 s of a 1.9 s first
    request on 100,000 instances on SQLite), configure the ORM, compile its statements and
    compile the templates (``env``) on the way. A request that arrives while its benchmark is
    being warmed waits for that computation (the cache is single-flight) instead of repeating
    it.
    """
    log = logging.getLogger(__name__)
    try:
        for template in env.list_templates() if env is not None else ():
            if stop.is_set():
                return  # shutting down: the rest would only delay it
            env.get_template(template)  # Jinja compiles a template on its first use
        with transaction(store.factory) as session:
            names = list(session.scalars(select(Benchmark.name).order_by(Benchmark.name)))
        for name in names:
            if stop.is_set():
                return
            try:
                with transaction(store.factory) as session:
                    bench = get_benchmark(session, name)
                    facets = benchmark_facets(session, bench, cache)
                    kept = not worth_keeping(facets) or facets_kept(session, bench)
                if not kept:
                    # Kept in the store, in a short write of its own (read above, beside other
                    # writers), so the next start reads them instead of scanning.
                    with transaction(store.write_factory) as session:
                        keep_facets(session, bench, facets)
                with transaction(store.factory) as session:
                    benchmark_view(
                        session,
                        name,
                        InstanceFilter(),
                        page_size=store.settings.page_size,
                        cache=cache,
                    )
            except AppellateError:
                continue  # deleted since it was listed
    except Exception:
        # A cold cache only makes the first request slower; the server runs on.
        if not stop.is_set():
            log.exception("start-up warm-up stopped")


def create_app(settings: Settings) -> FastAPI:
    """Build the application for ``settings``.

    The store opens (and migrates) once at startup and its connections are released at
    shutdown; routes share one memo of facets and filtered counts, which :func:`warm_up`
    fills in the background from startup on.

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
        stop = threading.Event()
        warm = threading.Thread(
            target=warm_up,
            args=(store, app.state.read_cache, stop, app.state.templates.env),
            name="warm-up",
            daemon=True,
        )
        warm.start()
        try:
            yield
        finally:
            stop.set()
            warm.join(timeout=WARM_UP_JOIN_SECONDS)
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
    # Admins only (each route requires the role): annotators and reviewers get 403. First:
    # /benchmarks/new must not be read as the page of a benchmark called "new".
    app.include_router(upload_pages.router)
    # The dashboard shows labels and detector outputs: reviewers and admins read it; annotators
    # work in review queues only (where blind mode hides both). Mutations check CSRF too.
    for router in (
        pages.router,
        metrics_pages.router,
        metrics_pages.api_router,
        judge_people_pages.router,
        judge_people_pages.api_router,
        judge_pages.router,
        disagreement_pages.router,
        disagreement_pages.api_router,
        jobs_pages.router,
        probes_pages.router,
        savings_pages.router,
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
