"""The API's refusals are in ``/openapi.json``, and ``resamples`` is bounded (issue 21 item 20).

The 422s routes answer for what a value means and the 400 of a body that cannot be parsed are
documented; each reason is checked against the route's real answer where a small store can
produce it, on both databases.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.settings import Settings
from app.web.error_docs import MAX_RESAMPLES
from tests.support import factories as f
from tests.support.auth_support import api_client
from tests.support.job_targets import MODEL, seed_job_targets


@pytest.fixture
def client(
    settings: Settings, factory: sessionmaker[Session], tmp_path: Path
) -> Iterator[TestClient]:
    seed_job_targets(factory, tmp_path)
    with api_client(settings) as c:
        yield c


@pytest.fixture
def spec(client: TestClient) -> dict[str, Any]:
    answer = client.get("/openapi.json")
    assert answer.status_code == 200
    return answer.json()


def _responses(spec: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    return spec["paths"][path][method]["responses"]


# Route -> words its 422 must document (the semantic refusals the issue names, and others).
SEMANTIC = [
    ("get", "/api/benchmarks/{name}/instances", "unknown sort field"),
    ("get", "/api/benchmarks/{name}/instances/{external_id}", "unknown sort field"),
    ("get", "/api/benchmarks/{name}/metrics", "not binary"),
    ("get", "/api/benchmarks/{name}/metrics", "`resamples` above 10,000"),
    ("get", "/api/benchmarks/{name}/disagreements", "needs a judge"),
    ("post", "/api/benchmarks/{name}/judge", "a judge needs pairs"),
    ("post", "/api/jobs/rank_errors", "unknown mode, ranker"),
    ("post", "/api/queues/{queue_id}/votes", "an item not in the queue"),
    ("post", "/api/queues/{queue_id}/adjudications", "an item not in the queue"),
    ("post", "/api/queues/{queue_id}/items/{instance_id}/reveal", "an item not in the queue"),
]


@pytest.mark.parametrize(("method", "path", "words"), SEMANTIC)
def test_semantic_422s_are_documented(
    spec: dict[str, Any], method: str, path: str, words: str
) -> None:
    documented = _responses(spec, method, path)["422"]
    assert words in documented["description"]
    # The body has FastAPI's shape: a list of refused values, each with its location.
    ref = documented["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    part = spec["components"]["schemas"][ref]["properties"]["detail"]
    assert part["type"] == "array"


def test_every_route_with_a_body_documents_the_400(spec: dict[str, Any]) -> None:
    bodies = [
        (path, method)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if "requestBody" in op
    ]
    assert len(bodies) >= 13  # the judge, each job kind, votes and adjudications
    for path, method in bodies:
        assert "400" in spec["paths"][path][method]["responses"], (method, path)


def test_the_documented_answers_are_the_real_ones(client: TestClient) -> None:
    sort = client.get(f"/api/benchmarks/{f.PAIRWISE}/instances", params={"sort": "bogus"})
    assert sort.status_code == 422
    assert sort.json()["detail"][0]["loc"] == ["query", "sort"]
    judge = client.post(f"/api/benchmarks/{f.STATEMENTS}/judge", json={"model": MODEL})
    assert judge.status_code == 422 and "pairs" in judge.json()["detail"][0]["msg"]
    unparsable = client.post(
        f"/api/benchmarks/{f.PAIRWISE}/judge",
        content=b"model=x",
        headers={"content-type": "multipart/form-data"},
    )
    assert unparsable.status_code == 400


def test_resamples_are_bounded(client: TestClient, spec: dict[str, Any]) -> None:
    params = spec["paths"]["/api/benchmarks/{name}/metrics"]["get"]["parameters"]
    (resamples,) = [p for p in params if p["name"] == "resamples"]
    assert resamples["schema"]["maximum"] == MAX_RESAMPLES == 10_000
    url = f"/api/benchmarks/{f.PAIRWISE}/metrics"
    refused = client.get(url, params={"resamples": MAX_RESAMPLES + 1})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["query", "resamples"]
    # The page takes the same bound (it was 100,000: 11 s inline on a small benchmark).
    page = client.get(f"/benchmarks/{f.PAIRWISE}/metrics", params={"resamples": 100_000})
    assert page.status_code == 422
    report = client.get(f"/benchmarks/{f.PAIRWISE}/report", params={"resamples": 100_000})
    assert report.status_code == 422
