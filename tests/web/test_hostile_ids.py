"""Integers past what a column holds are refused (404 or 422), never an overflow (500).

Every id column is a 4-byte ``INTEGER`` on PostgreSQL, which refused 3,000,000,000 with a 500;
SQLite's driver overflowed at 2**63 (also in a vote's ``instance_id``). Every integer parameter of
every route, found by walking the app, must be bounded by :data:`app.web.params.DB_INT_MAX`.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import pytest
from annotated_types import Le
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.main import create_app
from app.settings import Settings
from app.web.params import DB_INT_MAX
from tests.ingest.test_helpers import table_counts
from tests.support.auth_support import api_client
from tests.support.factories import PAIRWISE, seed_benchmarks
from tests.support.route_support import (
    Param,
    base_types,
    fill_path,
    route_params,
    takes_a_list,
)

INT_PARAMS = [
    p
    for p in route_params(create_app(Settings(database_url="sqlite://")))
    if int in base_types(p.annotation) and bool not in base_types(p.annotation)
]
TOO_BIG = [2**31, 3_000_000_000, 2**63, 2**64]


def _bounds(annotation: Any) -> list[int]:
    """Upper bounds anywhere in an annotation (``Annotated[int, Le(9)] | None`` gives [9])."""
    found = [m.le for m in getattr(annotation, "__metadata__", ()) if isinstance(m, Le)]
    for arg in typing.get_args(annotation):
        found += _bounds(arg)
    return found


def _upper_bound(param: Param) -> int | None:
    bounds = [m.le for m in param.info.metadata if isinstance(m, Le)]
    bounds += _bounds(param.annotation)
    return min(bounds) if bounds else None


def test_every_integer_parameter_is_bounded_by_the_column_type() -> None:
    assert {
        "GET /api/jobs/{job_id} path:job_id",
        "POST /api/queues/{queue_id}/votes json:instance_id",
        "POST /queues/{queue_id}/items/{instance_id}/vote path:instance_id",
    } <= {p.id for p in INT_PARAMS}
    unbounded = [
        p.id for p in INT_PARAMS if (bound := _upper_bound(p)) is None or bound > DB_INT_MAX
    ]
    assert not unbounded, "unbounded integer parameters:\n" + "\n".join(unbounded)


@pytest.fixture
def client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    seed_benchmarks(factory)
    with api_client(settings, "admin", raise_server_exceptions=False) as client:
        yield client


def _send(client: TestClient, param: Param, value: int) -> Any:
    valid = {"name": PAIRWISE, "external_id": "pair/002", "secret": "s"}
    path = fill_path(param.path, valid)
    if param.where == "path":
        path = fill_path(param.path, {**valid, param.name: str(value)})
        return client.request(param.method, path, follow_redirects=False)
    if param.where == "query":
        return client.request(param.method, path, params={param.name: value})
    if param.where == "form":
        return client.request(param.method, path, data={param.name: str(value)})
    # A list of integers (the layers to capture) gets the value as its one element.
    body = [value] if takes_a_list(param.annotation) else value
    return client.request(param.method, path, json={param.name: body})


@pytest.mark.parametrize("value", TOO_BIG)
def test_an_integer_too_big_for_its_column_is_refused(client: TestClient, value: int) -> None:
    wrong = []
    for param in INT_PARAMS:
        got = _send(client, param, value)
        if got.status_code != 422 or "less than or equal to" not in got.text:
            wrong.append(f"{param.id}: {got.status_code} {got.text[:100]!r}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("get", "/api/jobs/3000000000", None),
        ("post", "/api/jobs/3000000000/cancel", None),
        ("get", "/api/queues/3000000000", None),
        ("get", f"/api/queues/1/items/{2**63}", None),
        ("post", "/api/queues/1/votes", {"instance_id": 2**63, "value": "A", "version": 0}),
        ("post", "/api/queues/1/votes", {"instance_id": 1, "value": "A", "version": 2**63}),
    ],
)
def test_the_requests_that_overflowed(
    client: TestClient,
    factory: sessionmaker[Session],
    method: str,
    path: str,
    body: dict[str, Any] | None,
) -> None:
    before = table_counts(factory)
    got = client.request(method, path, json=body)
    assert got.status_code == 422, got.text
    assert table_counts(factory) == before


def test_ids_within_range_still_reach_the_route(client: TestClient) -> None:
    assert client.get(f"/api/jobs/{DB_INT_MAX}").status_code == 404
    assert client.get("/api/jobs/1").status_code == 404
