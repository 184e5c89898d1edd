"""Route conventions: documented /api bodies, one post-redirect response, no route left open."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.requests import Request

from app.main import create_app
from app.settings import Settings
from app.web.responses import redirect_after_post

# The /api routes of the jobs, review and benchmarks APIs, with their success status.
TYPED_ROUTES = {
    ("get", "/api/jobs"): "200",
    ("get", "/api/jobs/{job_id}"): "200",
    ("post", "/api/jobs/{job_id}/cancel"): "200",
    ("post", "/api/jobs/{job_id}/retry"): "200",
    ("post", "/api/benchmarks/{name}/judge"): "201",
    ("get", "/api/queues/{queue_id}"): "200",
    ("get", "/api/queues/{queue_id}/items/{instance_id}"): "200",
    ("post", "/api/queues/{queue_id}/votes"): "201",
    ("post", "/api/queues/{queue_id}/adjudications"): "201",
    ("post", "/api/queues/{queue_id}/items/{instance_id}/reveal"): "200",
    ("get", "/api/benchmarks"): "200",
    ("get", "/api/benchmarks/{name}"): "200",
    ("get", "/api/benchmarks/{name}/instances"): "200",
    ("get", "/api/benchmarks/{name}/instances/{external_id}"): "200",
}
# Signed-out pages: the sign-in forms and the load balancer's probe.
PUBLIC = {"/login", "/signin/{secret}", "/healthz"}


@pytest.fixture(scope="module")
def app_and_spec() -> Iterator[tuple[Any, dict[str, Any]]]:
    app = create_app(Settings())
    yield app, app.openapi()


def _schema(spec: dict[str, Any], ref_or_schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in ref_or_schema:
        return spec["components"]["schemas"][ref_or_schema["$ref"].rsplit("/", 1)[1]]
    if ref_or_schema.get("type") == "array":
        return _schema(spec, ref_or_schema["items"])
    return ref_or_schema


def test_every_api_route_documents_its_success_body(
    app_and_spec: tuple[Any, dict[str, Any]],
) -> None:
    _, spec = app_and_spec
    api = {
        (method, path): op
        for path, ops in spec["paths"].items()
        if path.startswith("/api/")
        for method, op in ops.items()
    }
    assert TYPED_ROUTES.keys() <= api.keys()
    for (method, path), op in api.items():
        status = TYPED_ROUTES.get((method, path)) or next(s for s in op["responses"] if s < "300")
        body = op["responses"][status].get("content", {}).get("application/json", {})
        assert "schema" in body, f"{method.upper()} {path}: no {status} body schema"
        schema = _schema(spec, body["schema"])
        assert schema.get("properties"), f"{method.upper()} {path}: {schema}"


def test_review_bodies_document_their_fields(app_and_spec: tuple[Any, dict[str, Any]]) -> None:
    _, spec = app_and_spec
    schemas = spec["components"]["schemas"]
    assert {"instance_id", "version", "own_vote", "n_votes", "resolved", "votes"} <= set(
        schemas["ItemState"]["properties"]
    )
    assert {"progress", "blind", "choices", "overlap_k"} <= set(
        schemas["QueueSummary"]["properties"]
    )
    vote = spec["paths"]["/api/queues/{queue_id}/votes"]["post"]["responses"]
    assert vote["201"]["content"]["application/json"]["schema"]["$ref"].endswith("/Written")
    assert "409" in vote


def _request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "path": "/x", "headers": raw})


def test_redirect_after_post_serves_htmx_and_plain_forms() -> None:
    plain = redirect_after_post(_request({}), "/queues/3")
    assert (plain.status_code, plain.headers["location"]) == (303, "/queues/3")
    htmx = redirect_after_post(_request({"HX-Request": "true"}), "/queues/3")
    assert (htmx.status_code, htmx.headers["HX-Redirect"], htmx.body) == (204, "/queues/3", b"")
    assert "location" not in htmx.headers
    # A history restore wants a whole page, not an htmx redirect.
    restore = {"HX-Request": "true", "HX-History-Restore-Request": "true"}
    assert redirect_after_post(_request(restore), "/queues/3").status_code == 303


def test_every_route_but_sign_in_refuses_anonymous_requests(settings: Settings) -> None:
    app = create_app(settings)
    # FastAPI keeps an included router's routes on that router (see tests/review/test_review.py).
    routes = [
        (method, route.path)
        for entry in app.routes
        for route in getattr(getattr(entry, "original_router", None), "routes", [entry])
        if isinstance(route, APIRoute) and route.path not in PUBLIC
        for method in sorted(route.methods)
    ]
    assert len(routes) > 40
    with TestClient(app) as client:
        for method, path in routes:
            url = re.sub(r"{(\w+)(:path)?}", "1", path)
            r = client.request(method, url, follow_redirects=False)
            # 401 for the API, a redirect to the sign-in form for pages.
            assert r.status_code in (401, 303), (method, path, r.status_code)
            if r.status_code == 303:
                assert r.headers["location"].startswith("/login"), (method, path)
