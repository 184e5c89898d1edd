"""``/docs`` and ``/openapi.json``: offline Swagger UI behind sign-in (headless Chromium)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from app.settings import Settings
from app.store import Store
from tests.browser.test_pages import browser
from tests.support.auth_support import bearer, signed_in_context
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]  # the shared Chromium fixture, imported so pytest finds it here

LOOPBACK = "http://127.0.0.1:"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Settings]]:
    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'docs.sqlite3'}")
    Store.open(settings).close()
    with live_server(settings) as url:
        yield url, settings


def _offline(context: Any) -> list[str]:
    """Abort every request that leaves 127.0.0.1; return the URLs that tried."""
    blocked: list[str] = []

    def route(r: Any) -> None:
        if r.request.url.startswith(LOOPBACK):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    return blocked


def test_docs_render_offline_with_our_operations(browser: Any, served: tuple[str, Settings]):
    url, settings = served
    context = signed_in_context(browser, url, settings)
    blocked = _offline(context)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_default_timeout(15_000)
    page.goto(f"{url}/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Appellate")
    operations = page.locator(".opblock-summary-path")
    expect(operations.first).to_be_visible()
    paths = set(operations.all_inner_texts())
    spec = httpx.get(f"{url}/openapi.json", headers=bearer(settings, "docs", "reviewer")).json()
    assert "/api/benchmarks/{name}/instances" in spec["paths"]
    # Swagger UI may break long paths with zero-width spaces.
    shown = {p.replace("\u200b", "") for p in paths}
    assert set(spec["paths"]) <= shown, set(spec["paths"]) - shown
    assert blocked == [] and errors == []
    context.close()


def test_docs_and_schema_need_sign_in(browser: Any, served: tuple[str, Settings]):
    url, _ = served
    context = browser.new_context()
    _offline(context)
    page = context.new_page()
    page.goto(f"{url}/docs")
    assert page.url == f"{url}/login?next=%2Fdocs"
    expect(page.locator("form[action^='/login']")).to_be_visible()
    context.close()
    schema = httpx.get(f"{url}/openapi.json")
    assert schema.status_code == 401 and "sign in" in schema.json()["detail"]
    # FastAPI's own routes are gone, not just hidden.
    assert httpx.get(f"{url}/redoc").status_code in (303, 404)
    assert httpx.get(f"{url}/docs/oauth2-redirect", follow_redirects=False).status_code in (
        303,
        404,
    )
