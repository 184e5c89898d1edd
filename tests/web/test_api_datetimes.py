"""API datetimes are RFC 3339 in UTC on both databases; /openapi.json documents the errors.

SQLite returns the naive datetimes SQLAlchemy stored, and PostgreSQL aware ones in the session's
time zone: before issue 14 the API wrote ``2026-12-01T04:03:00.123456`` (no zone) on SQLite.
The PostgreSQL side runs with a session time zone far from UTC (``PGTZ``), so UTC is checked
there too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.main import create_app
from app.services.evidence.comments import add_comment
from app.services.evidence.labels import append_label
from app.settings import Settings
from app.tables import Instance
from tests.support.auth_support import api_client
from tests.support.factories import PAIRWISE, seed_benchmarks
from tests.support.route_support import api_routes

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


def _datetimes(value: Any) -> Iterator[str]:
    if isinstance(value, str) and ISO.match(value):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _datetimes(item)
    elif isinstance(value, list):
        for item in value:
            yield from _datetimes(item)


@pytest.fixture
def client(
    settings: Settings, factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    # libpq reads PGTZ when it connects: the app's PostgreSQL sessions run at UTC-5/-4.
    monkeypatch.setenv("PGTZ", "America/New_York")
    seed_benchmarks(factory)
    with transaction(factory) as session:
        instance = session.query(Instance).filter_by(external_id="pair/002").one()
        append_label(session, instance.id, "reference", "A", source="review", author="ann")
        add_comment(session, instance.id, "ann", "a note")
    with api_client(settings, "admin") as client:
        yield client


def test_every_api_datetime_is_utc_with_its_offset(client: TestClient) -> None:
    before = datetime.now(UTC)
    got = client.get(f"/api/benchmarks/{PAIRWISE}/instances/pair/002")
    assert got.status_code == 200, got.text
    stamps = list(_datetimes(got.json()))
    # The instance, its label events (import and review), its judgments, scores and comment.
    assert len(stamps) >= 6, stamps
    for stamp in stamps:
        parsed = datetime.fromisoformat(stamp)
        assert parsed.tzinfo is not None, f"{stamp} has no time zone"
        assert parsed.utcoffset() is not None and parsed.utcoffset().total_seconds() == 0, stamp
        # Stored as UTC and read back as UTC: the instant is right, not shifted by a zone.
        assert abs((parsed - before).total_seconds()) < 600, stamp


def _operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def test_openapi_documents_the_errors_each_route_returns(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    operations = list(_operations(schema))
    assert len(operations) >= 15
    missing = []
    for path, method, operation in operations:
        codes = set(operation.get("responses", {}))
        expected = set() if path == "/healthz" else {"401", "403"}
        if "{" in path:
            expected.add("404")
        if method == "post" and path.endswith(("/cancel", "/retry", "/votes", "/adjudications")):
            expected.add("409")
        if not expected <= codes:
            missing.append(f"{method.upper()} {path}: {sorted(expected - codes)}")
    assert not missing, "\n".join(missing)
    error = schema["paths"]["/api/jobs/{job_id}"]["get"]["responses"]["404"]
    ref = error["content"]["application/json"]["schema"]["$ref"]
    detail = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert detail["properties"]["detail"]["type"] == "string"


def test_documented_errors_are_the_errors_returned(client: TestClient, settings: Settings) -> None:
    assert client.get("/api/jobs/12345").status_code == 404
    assert client.post("/api/jobs/12345/cancel").json() == {"detail": "no job 12345"}
    with TestClient(create_app(settings)) as anonymous:
        assert anonymous.get("/api/benchmarks").status_code == 401
    with api_client(settings, "annotator") as annotator:
        assert annotator.get("/api/benchmarks").status_code == 403
    assert {r.path for r in api_routes(client.app)} >= {"/api/jobs/{job_id}/cancel"}
