"""The worker loop with small handlers: outcomes, retries, cancel, graceful stop."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db import session_factory, transaction
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.store import Store
from app.tables import Benchmark, Job
from workers.runner import JobContext, JobStopped, Worker, known_kinds


def _store(settings: Settings, engine: Any) -> Store:
    return Store(settings=settings, engine=engine, factory=session_factory(engine))


def _enqueue(store: Store, kind: str, max_attempts: int = 3) -> int:
    with transaction(store.factory) as s:
        return job_queue.enqueue(s, kind, {}, max_attempts=max_attempts).id


def _job(store: Store, job_id: int) -> Job:
    with transaction(store.factory) as s:
        return job_queue.get_job(s, job_id)


def _benchmarks(store: Store) -> int:
    with transaction(store.factory) as s:
        return int(s.scalar(select(func.count()).select_from(Benchmark)) or 0)


def _add_benchmark(i: int) -> Any:
    def work(session: Session) -> None:
        session.add(Benchmark(name=f"b{i}", kind="pairwise"))

    return work


def test_done_failed_and_retried_outcomes(settings: Settings, engine: Any):
    store = _store(settings, engine)
    calls = {"flaky": 0}

    def ok(ctx: JobContext) -> dict[str, Any]:
        for i in range(3):
            ctx.commit(_add_benchmark(i), done=i + 1, total=3)
        return {"batches": 3}

    def flaky(ctx: JobContext) -> dict[str, Any]:
        calls["flaky"] += 1
        raise RuntimeError(f"boom {calls['flaky']}")

    worker = Worker(store, {"ok": ok, "flaky": flaky}, log=lambda _: None)
    good, bad = _enqueue(store, "ok"), _enqueue(store, "flaky", max_attempts=2)
    assert worker.run(once=True) == 3  # ok, flaky, flaky again
    job = _job(store, good)
    assert (job.status, job.result, job.progress_done, job.progress_total) == (
        "done",
        {"batches": 3},
        3,
        3,
    )
    assert _benchmarks(store) == 3
    job = _job(store, bad)
    assert (job.status, job.attempts, calls["flaky"]) == ("failed", 2, 2)
    assert job.error == "RuntimeError: boom 2"


def test_cancel_mid_job_stops_before_the_next_batch_write(settings: Settings, engine: Any):
    store = _store(settings, engine)
    job_id = _enqueue(store, "long")

    def long(ctx: JobContext) -> dict[str, Any]:
        ctx.commit(_add_benchmark(0), done=1, total=3)
        with transaction(store.factory) as s:  # the user presses "cancel"
            job_queue.cancel(s, ctx.claim.job_id)
        ctx.commit(_add_benchmark(1), done=2, total=3)  # refused: no longer ours
        raise AssertionError("unreachable")

    worker = Worker(store, {"long": long}, log=lambda _: None)
    claim = worker.claim()
    assert claim is not None
    assert worker.execute(claim) == "stopped"
    assert _job(store, job_id).status == "cancelled"
    assert _benchmarks(store) == 1


def test_shutdown_requeues_the_job_without_spending_an_attempt(settings: Settings, engine: Any):
    store = _store(settings, engine)
    job_id = _enqueue(store, "long", max_attempts=1)

    def long(ctx: JobContext) -> dict[str, Any]:
        worker.shutdown.set()  # SIGTERM arrives during the batch
        ctx.commit(_add_benchmark(0), done=1, total=2)  # the batch is still written
        raise AssertionError("unreachable")

    worker = Worker(store, {"long": long}, log=lambda _: None)
    assert worker.run() == 1
    job = _job(store, job_id)
    assert (job.status, job.attempts, job.progress_done) == ("queued", 0, 1)
    assert _benchmarks(store) == 1


def test_a_lost_lease_stops_the_handler(settings: Settings, engine: Any):
    store = _store(settings, engine)
    job_id = _enqueue(store, "long")

    def long(ctx: JobContext) -> dict[str, Any]:
        with transaction(store.factory) as s:  # another worker took over after expiry
            s.get_one(Job, ctx.claim.job_id).lease_owner = "someone-else"
        try:
            ctx.progress(1, 2)
        except JobStopped:
            return {"stopped": True}
        raise AssertionError("progress on a lost lease must stop the job")

    worker = Worker(store, {"long": long}, log=lambda _: None)
    claim = worker.claim()
    assert claim is not None
    assert worker.execute(claim) == "lost"  # finish() refused: the job is not ours
    assert _job(store, job_id).lease_owner == "someone-else"


def test_known_kinds_refuses_unknown_names():
    handlers = {"a": lambda ctx: {}, "b": lambda ctx: {}}
    assert sorted(known_kinds(handlers, ["b"])) == ["b"]
    assert sorted(known_kinds(handlers, None)) == ["a", "b"]
    with pytest.raises(ValueError, match="unknown job kinds"):
        known_kinds(handlers, ["c"])
