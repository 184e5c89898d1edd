"""Text no database can store is refused where it enters a request, the same on both databases.

A NUL character (PostgreSQL refuses it: a 500 before issue 14, while SQLite stored it) or a lone
surrogate (SQLite stored it, then every read of it failed) in any path segment, query
parameter, form field or JSON body value or key gives 404 (path) or 422 (elsewhere), before any
route code runs. Every declared string parameter of every route is attacked, found by walking
the app's routes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.main import create_app
from app.settings import Settings
from tests.ingest.test_helpers import table_counts
from tests.support.auth_support import api_client
from tests.support.factories import PAIRWISE, seed_benchmarks
from tests.support.route_support import Param, base_types, fill_path, route_params

NUL = "a\x00b"
SURROGATE = "q\ud800"
NUL_REASON = "NUL character (cannot be stored)"

TEXT_PARAMS = [
    p
    for p in route_params(create_app(Settings(database_url="sqlite://")))
    if str in base_types(p.annotation)
]


@pytest.fixture
def client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    seed_benchmarks(factory)
    with api_client(settings, "admin") as client:
        yield client


def _send(client: TestClient, param: Param, value: str) -> Any:
    valid = {"name": PAIRWISE, "external_id": "pair/002", "secret": "s"}
    path = fill_path(param.path, valid)
    if param.where == "path":
        path = fill_path(param.path, {**valid, param.name: value.replace("\x00", "%00")})
        return client.request(param.method, path, follow_redirects=False)
    if param.where == "query":
        return client.request(param.method, path, params={param.name: value})
    if param.where == "form":
        return client.request(param.method, path, data={param.name: value})
    return client.request(param.method, path, **_json({param.name: value}))


def _json(value: Any) -> dict[str, Any]:
    # httpx would encode the body as UTF-8 text, which a lone surrogate is not; a client
    # sends the JSON escape, as json.dumps writes it.
    return {"content": json.dumps(value), "headers": {"content-type": "application/json"}}


def test_the_walk_finds_the_parameters_the_attack_found() -> None:
    ids = {p.id for p in TEXT_PARAMS}
    assert {
        "GET /api/jobs query:status",
        "GET /api/benchmarks/{name} path:name",
        "GET /api/benchmarks/{name}/instances query:q",
        "POST /instances/{instance_id}/comments form:body",
        "POST /queues form:name",
        "POST /account/tokens form:label",
        "POST /api/benchmarks/{name}/judge json:model",
    } <= ids


def test_nul_in_any_string_parameter_is_refused(client: TestClient) -> None:
    wrong = []
    for param in TEXT_PARAMS:
        got = _send(client, param, NUL)
        expected = 404 if param.where == "path" else 422
        if got.status_code != expected or NUL_REASON not in got.text:
            wrong.append(f"{param.id}: {got.status_code} {got.text[:120]!r}")
    assert not wrong, "\n".join(wrong)


def test_lone_surrogate_in_any_json_string_is_refused(client: TestClient) -> None:
    wrong = []
    for param in TEXT_PARAMS:
        if param.where != "json":
            continue
        got = _send(client, param, SURROGATE)
        if got.status_code != 422 or "lone surrogate U+D800" not in got.text:
            wrong.append(f"{param.id}: {got.status_code} {got.text[:120]!r}")
    assert not wrong, "\n".join(wrong)


def test_a_bad_json_key_is_refused(client: TestClient) -> None:
    got = client.post(f"/api/benchmarks/{PAIRWISE}/judge", **_json({"model": "m", "x\x00": 1}))
    assert got.status_code == 422
    assert got.json()["detail"][0]["loc"] == ["body", "x\\u0000"]


def test_a_bad_form_field_decoded_by_a_client_charset_is_refused(client: TestClient) -> None:
    # Starlette decodes multipart fields with the charset the client names: the one way a
    # lone surrogate reaches a form field.
    body = b'--b\r\nContent-Disposition: form-data; name="body"\r\n\r\nq\\ud800\r\n--b--\r\n'
    got = client.post(
        "/instances/1/comments",
        content=body,
        headers={"content-type": "multipart/form-data; boundary=b; charset=unicode_escape"},
    )
    assert got.status_code == 422, got.text
    assert "lone surrogate U+D800" in got.text


def test_a_query_parameter_read_by_the_route_itself_is_checked(client: TestClient) -> None:
    # The disagreements page reads request.query_params itself, beyond its declared ones.
    got = client.get(f"/benchmarks/{PAIRWISE}/disagreements", params={"mode": NUL})
    assert got.status_code == 422
    assert NUL_REASON in got.text


def test_writes_with_bad_text_store_nothing(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    before = table_counts(factory)
    writes = [
        ("post", f"/api/benchmarks/{PAIRWISE}/judge", _json({"model": f"m{NUL}"})),
        ("post", f"/api/benchmarks/{PAIRWISE}/judge", _json({"model": SURROGATE})),
        ("post", "/instances/1/comments", {"data": {"body": NUL}}),
        ("post", "/queues", {"data": {"benchmark": PAIRWISE, "name": NUL, "label": "reference"}}),
        ("post", "/account/tokens", {"data": {"label": NUL}}),
    ]
    for method, path, kwargs in writes:
        got = client.request(method, path, follow_redirects=False, **kwargs)
        assert got.status_code == 422, (path, got.status_code, got.text[:300])
    assert table_counts(factory) == before


def test_good_text_still_passes(client: TestClient) -> None:
    """Escapes that are not NUL or lone surrogates, and non-ASCII text, are ordinary text."""
    got = client.get(f"/api/benchmarks/{PAIRWISE}/instances", params={"q": "naïve \U0001f600"})
    assert got.status_code == 200, got.text
    got = client.post(
        f"/api/benchmarks/{PAIRWISE}/judge", json={"model": "no-such-model \\u0000 \U0001f600"}
    )
    assert "string_unstorable" not in got.text, got.text


def test_the_label_errors_selection_and_column_choice_refuse_hostile_values(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    # Issue 21 items 5 and 8 added forms and a parameter after the hostile-input walk: a huge
    # id, a NUL or a percent-encoded NUL that only a second decoding would reveal, and an
    # unknown column are refused or ignored, never a 500, and store nothing.
    before = table_counts(factory)
    base = f"/benchmarks/{PAIRWISE}/disagreements"
    sends = [
        (f"{base}/defects", {"item": str(10**30)}, 422),
        (f"{base}/defects", {"item": "1", "reason": NUL}, 422),
        (f"{base}/defects", {"item": "1", "tag": NUL}, 422),
        (f"{base}/queue", {"item": "-1", "queue": "new", "queue_name": "q"}, 422),
        (f"{base}/queue", {"item": "1", "queue": "9" * 40}, 422),
        (f"{base}/queue", {"item": "1", "queue": "1", "list_query": NUL}, 422),
    ]
    for path, data, status in sends:
        got = client.post(path, data=data, follow_redirects=False)
        assert got.status_code == status, (path, data, got.status_code, got.text[:300])
    assert table_counts(factory) == before
    # A list query whose value decodes to a NUL goes back into a redirect, re-encoded.
    got = client.post(
        f"{base}/queue",
        data={"item": "1", "queue": "new", "queue_name": "q", "label": "reference",
              "list_query": "mode=%00&x=%ED%A0%80"},
        follow_redirects=False,
    )  # fmt: skip
    assert got.status_code in (303, 422), got.text[:300]
    for cols in (NUL, "%00", "no-such-column", "x" * 5000):
        got = client.get(f"/benchmarks/{PAIRWISE}", params={"cols": cols})
        assert got.status_code in (200, 422), (cols[:20], got.status_code, got.text[:300])
