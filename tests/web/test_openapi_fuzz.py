"""A bounded property-based fuzz of every operation in ``/openapi.json``: no answer is a 5xx.

An admin's API token sends requests generated from the schema itself
(:mod:`tests.support.fuzz_support`) to the app on a real database, each dialect in turn, over a
small seeded store: the three test benchmarks, a blind and an open review queue, a registered model
and a job of each status, so that path parameters are often real ids and requests reach the
handlers. Server exceptions come back as 500 answers (``raise_server_exceptions=False``) and are
counted, never raised, so one run lists every failing request instead of stopping at the first.

The store is seeded once per dialect, not per example: no operation in the schema deactivates a
user or deletes data, and the state the fuzz leaves behind (jobs retried and cancelled, votes,
adjudications, revealed items) is more state for later examples to meet.

Bounded for CI: ``APPELLATE_FUZZ_EXAMPLES`` examples per operation (default 150), with seed
``APPELLATE_FUZZ_SEED`` (default 0) so a run is reproducible; set another seed to explore.
"""

from __future__ import annotations

import os
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, seed, target
from hypothesis import settings as hypothesis_settings
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.language_models import register_language_model
from app.services.jobs import queue as job_queue
from app.services.review import queues
from app.settings import Settings
from app.tables import Benchmark, Detector, Instance, JobStatus, LabelEvent
from tests.support import factories as f
from tests.support.auth_support import api_client
from tests.support.fuzz_support import FuzzRequest, Operation, operations, requests

pytestmark = pytest.mark.slow

# Requests per operation: 75 in the suite (each operation still reaches its handler, which the
# test asserts); a longer fuzz is the same test with APPELLATE_FUZZ_EXAMPLES=1000 (or more).
EXAMPLES = int(os.environ.get("APPELLATE_FUZZ_EXAMPLES", "75"))
SEED = int(os.environ.get("APPELLATE_FUZZ_SEED", "0"))
MODEL = "fuzz-model"


def _queue(session: Session, bench_name: str, name: str, label: str, blind: bool) -> int:
    bench = session.scalars(select(Benchmark).where(Benchmark.name == bench_name)).one()
    ids = session.scalars(select(Instance.id).where(Instance.benchmark_id == bench.id)).all()
    queue = queues.create_queue(
        session, bench, ids, name=name, label_name=label, source="filter", blind=blind
    )
    return queue.id


def _job(session: Session, status: JobStatus) -> int:
    job = job_queue.enqueue(session, "judge", {"benchmark": f.PAIRWISE, "model": MODEL})
    job.status = status.value
    job.error = "seeded failure" if status == JobStatus.failed else None
    job.result = {} if status == JobStatus.done else None
    return job.id


def seed_store(factory: sessionmaker[Session]) -> dict[str, list[Any]]:
    """Seed the store; real values by the parameter and field names that take them."""
    f.seed_benchmarks(factory)
    with transaction(factory) as session:
        # A model need not exist on disk: the judge route only queues a job naming it.
        register_language_model(session, MODEL, path="/nonexistent/fuzz-model", fingerprint="0")
        queue_ids = [
            _queue(session, f.PAIRWISE, "fuzz-blind", "reference", blind=True),
            _queue(session, f.STATEMENTS, "fuzz-open", "truth", blind=False),
        ]
        job_ids = [_job(session, status) for status in JobStatus]
        session.flush()
        instances = session.execute(select(Instance.id, Instance.external_id)).all()
        # An item's version is the id of its label set's newest event.
        versions = [0, *session.scalars(select(LabelEvent.id))]
        detectors = list(session.scalars(select(Detector.name)))
    labels = ["reference", "truth", f.FLIP]
    return {
        "name": [f.PAIRWISE, f.STATEMENTS, f.RESPONSES],
        # The job kinds' JSON parameters (POST /api/jobs/{kind}).
        "benchmark": [f.PAIRWISE, f.STATEMENTS, f.RESPONSES],
        "probe": detectors,
        "builder": ["truth", "roleplay"],
        "external_id": [ext for _, ext in instances],
        "queue_id": queue_ids,
        "instance_id": [iid for iid, _ in instances],
        "job_id": job_ids,
        "status": [s.value for s in JobStatus],
        "detector": detectors,
        "judge": detectors,
        "score_detector": detectors,
        "label": [*labels, "reference=A", "truth=1", "reference="],
        "slice": ["source", "persona", "source=mmlu-pro-law", "persona=flat-earther"],
        "positive": ["A", "B", "0", "1"],
        "sort": ["group", "-external_id", f"-score:{f.RM_1}", "label:reference"],
        "model": [MODEL],
        "mode": ["generate", "forced"],
        "orders": [["AB", "BA"], ["AB"], ["BA"]],
        "value": ["A", "B", "tie", "0", "1", None],
        "version": versions,
        "resamples": [1, 2, 10],
    }


@dataclass
class Tally:
    """What the fuzz sent and got: counts by operation and status, and every 5xx."""

    sent: Counter[tuple[str, str]] = field(default_factory=Counter)
    statuses: dict[tuple[str, str], Counter[int]] = field(default_factory=dict)
    deepest: Counter[tuple[str, str]] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def add(self, op: Operation, request: FuzzRequest, status: int, text: str) -> None:
        self.sent[op.key] += 1
        self.statuses.setdefault(op.key, Counter())[status] += 1
        self.deepest[op.key] = max(self.deepest[op.key], depth(status, text))
        if status >= 500:
            self.failures.append(f"{status} for {request.describe()}\n    {text[:300]}")

    def summary(self) -> str:
        lines = [f"{sum(self.sent.values())} requests over {len(self.sent)} operations"]
        for key, n in sorted(self.sent.items()):
            codes = ", ".join(f"{c}x{k}" for c, k in sorted(self.statuses[key].items()))
            lines.append(f"  {key[0]:6} {key[1]}: {n} ({codes})")
        return "\n".join(lines)


def depth(status: int, text: str) -> float:
    """How far a request got, as a score for Hypothesis to raise.

    Not found (0), refused by validation (1) or by the handler's own checks (2), a conflict
    (3), done (4). Hypothesis's targeting mutates the requests that got furthest, so careful
    requests that reach a handler's own checks are varied until some get through them.
    """
    if 200 <= status < 300:
        return 4.0
    if status == 409:
        return 3.0
    if status == 422:
        return 2.0 if "invalid_filter" in text else 1.0
    return 0.0


def fuzz_operation(
    client: TestClient,
    spec: dict[str, Any],
    known: dict[str, list[Any]],
    op: Operation,
    n: int,
    tally: Tally,
) -> None:
    """Send ``n`` generated requests to ``op``, recording every answer in ``tally``."""

    # Generation only: nothing is raised inside, so there is nothing to shrink or replay.
    # The seed is the operation's own, so adding an operation leaves the others' requests be.
    @seed(SEED * 2**32 + zlib.crc32(" ".join(op.key).encode()))
    @hypothesis_settings(
        max_examples=n,
        deadline=None,
        database=None,
        phases=[Phase.generate, Phase.target],
        suppress_health_check=list(HealthCheck),
    )
    @given(requests(spec, known, op))
    def send(request: FuzzRequest) -> None:
        got = client.request(
            request.method,
            request.url,
            content=request.content,
            headers=dict(request.headers),
            follow_redirects=False,
        )
        tally.add(op, request, got.status_code, got.text)
        target(depth(got.status_code, got.text))

    send()


def test_no_operation_of_the_schema_answers_5xx(
    settings: Settings, factory: sessionmaker[Session], dialect: str
) -> None:
    known = seed_store(factory)
    tally = Tally()
    started = time.monotonic()
    with api_client(settings, "admin", raise_server_exceptions=False) as client:
        spec = client.get("/openapi.json").json()
        ops = operations(spec)
        for op in ops:
            fuzz_operation(client, spec, known, op, EXAMPLES, tally)
    elapsed = time.monotonic() - started
    print(f"\n[{dialect}] {elapsed:.1f} s, {tally.summary()}")

    assert not tally.failures, f"{len(tally.failures)} 5xx answers:\n" + "\n".join(tally.failures)
    assert set(tally.sent) == {op.key for op in ops}
    # Real ids must carry requests past the 404 and the validation into every handler.
    shallow = [key for key in tally.sent if tally.deepest[key] < 2]
    assert not shallow, f"never past validation: {shallow}\n{tally.summary()}"


def test_the_fuzz_walks_every_operation_of_the_schema(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    with api_client(settings, "admin") as client:
        spec = client.get("/openapi.json").json()
    keys = {op.key for op in operations(spec)}
    assert len(keys) == sum(len(item) for item in spec["paths"].values())
    assert {("POST", "/api/queues/{queue_id}/votes"), ("GET", "/healthz")} <= keys


@pytest.mark.parametrize(
    ("path", "body", "loc", "echoed"),
    [
        (
            "/api/queues/1/adjudications",
            b'{"instance_id": 1, "version": -Infinity, "value": null}',
            ["body", "version"],
            "-inf",
        ),
        ("/api/benchmarks/jb-mini/judge", b'{"a": NaN}', ["body", "model"], {"a": "nan"}),
    ],
)
def test_a_non_finite_number_in_a_body_is_a_422_that_echoes_it_as_text(
    settings: Settings,
    factory: sessionmaker[Session],
    path: str,
    body: bytes,
    loc: list[str],
    echoed: Any,
) -> None:
    # Python's parser reads NaN and Infinity; echoing them in the 422 failed with a 500.
    with api_client(settings, "admin", raise_server_exceptions=False) as client:
        got = client.post(path, content=body, headers={"content-type": "application/json"})
    assert got.status_code == 422, got.text
    errors = {tuple(e["loc"]): e["input"] for e in got.json()["detail"]}
    assert errors[tuple(loc)] == echoed
