"""``POST /api/jobs/{kind}`` and the judge route: a job queued from its JSON parameters.

A bad value answers 422 naming the field, from pydantic (a wrong type, an unknown key) or from
the kind's own checks, and queues nothing; both databases.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.settings import Settings
from app.tables import Job
from tests.support import factories as f
from tests.support.auth_support import api_client
from tests.support.job_targets import MODEL, REQUESTS, seed_job_targets


@pytest.fixture
def client(
    settings: Settings, factory: sessionmaker[Session], tmp_path: Path
) -> Iterator[TestClient]:
    seed_job_targets(factory, tmp_path)
    with api_client(settings) as c:
        yield c


def _fields(answer: Any) -> list[str]:
    """The field each 422 detail names (the last element of its location)."""
    return [str(d["loc"][-1]) for d in answer.json()["detail"]]


def _jobs(factory: sessionmaker[Session]) -> int:
    with transaction(factory) as s:
        return int(s.scalar(select(func.count()).select_from(Job)) or 0)


@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_each_kind_starts_from_its_parameters(
    client: TestClient, factory: sessionmaker[Session], kind: str
) -> None:
    good, bad, field = REQUESTS[kind]
    answer = client.post(f"/api/jobs/{kind}", json=good)
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["kind"] == kind and body["status"] == "queued"
    assert {k: body["params"][k] for k in good} == good
    refused = client.post(f"/api/jobs/{kind}", json=bad)
    assert refused.status_code == 422, refused.text
    assert _fields(refused) == [field]
    assert _jobs(factory) == 1


@pytest.mark.parametrize(
    ("kind", "body", "field"),
    [
        ("judge", {"benchmark": f.PAIRWISE, "model": MODEL, "limit": "many"}, "limit"),
        ("judge", {"benchmark": f.PAIRWISE, "model": MODEL, "temperature": 1}, "temperature"),
        ("extract", {"model": MODEL}, "benchmark"),
        ("rank_errors", {"benchmark": "choice-mini", "rankers": "consensus"}, "rankers"),
    ],
)
def test_a_wrong_type_or_key_is_a_422_naming_it(
    client: TestClient, factory: sessionmaker[Session], kind: str, body: dict[str, Any], field: str
) -> None:
    answer = client.post(f"/api/jobs/{kind}", json=body)
    assert answer.status_code == 422
    assert field in _fields(answer)
    assert _jobs(factory) == 0


def test_the_app_queues_metrics_jobs_itself(client: TestClient) -> None:
    answer = client.post("/api/jobs/compute_metrics", json={"benchmark": f.PAIRWISE})
    assert answer.status_code in (404, 405)


def test_the_judge_route_takes_the_benchmark_from_its_path(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    answer = client.post(f"/api/benchmarks/{f.PAIRWISE}/judge", json={"model": MODEL})
    assert answer.status_code == 201
    # No mode given: the registered model's (forced).
    assert answer.json()["params"]["judge"] == f"{MODEL}/forced"
    bad = client.post(
        f"/api/benchmarks/{f.PAIRWISE}/judge", json={"model": MODEL, "orders": ["AB", "CA"]}
    )
    assert bad.status_code == 422 and _fields(bad) == ["orders"]
    elsewhere = client.post(f"/api/benchmarks/{f.STATEMENTS}/judge", json={"model": MODEL})
    assert elsewhere.status_code == 422 and _fields(elsewhere) == ["benchmark"]
    assert _jobs(factory) == 1


def test_an_annotator_cannot_start_jobs(settings: Settings, client: TestClient) -> None:
    good = REQUESTS["build_dataset"][0]
    with api_client(settings, role="annotator") as annotator:
        assert annotator.post("/api/jobs/build_dataset", json=good).status_code == 403
