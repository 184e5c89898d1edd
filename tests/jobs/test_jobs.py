"""The job queue on SQLite and PostgreSQL: claims, leases, retries, cancel, concurrent claimers."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_factory, transaction
from app.errors import Conflict
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.store import Store
from app.tables import Job, utcnow


def _enqueue(factory: sessionmaker[Session], n: int, kind: str = "judge", **kw: int) -> list[int]:
    with transaction(factory) as s:
        return [job_queue.enqueue(s, kind, {"n": i}, **kw).id for i in range(n)]


def _claim(factory: sessionmaker[Session], owner: str, **kw: object) -> job_queue.Claim | None:
    with transaction(factory) as s:
        return job_queue.claim(s, owner, lease_seconds=kw.pop("lease", 60), **kw)  # type: ignore[arg-type]


def _job(factory: sessionmaker[Session], job_id: int) -> Job:
    with transaction(factory) as s:
        return job_queue.get_job(s, job_id)


def test_claims_oldest_first_by_kind_and_marks_running(factory: sessionmaker[Session]):
    first, second = _enqueue(factory, 2)
    (other,) = _enqueue(factory, 1, kind="extract")
    claim = _claim(factory, "w1", kinds=["extract"])
    assert claim is not None and claim.job_id == other and claim.attempt == 1
    claim = _claim(factory, "w1")
    assert claim is not None and (claim.job_id, claim.params) == (first, {"n": 0})
    job = _job(factory, first)
    assert (job.status, job.lease_owner, job.attempts) == ("running", "w1", 1)
    assert job.lease_expires_at is not None and job.started_at is not None
    assert _claim(factory, "w2", job_id=first) is None  # already taken
    assert _claim(factory, "w2", job_id=second).job_id == second  # type: ignore[union-attr]
    assert _claim(factory, "w2") is None


def test_concurrent_claimers_never_share_a_job(factory: sessionmaker[Session]):
    ids = _enqueue(factory, 24)
    got: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            while (claim := _claim(factory, name)) is not None:
                with lock:
                    got.append(claim.job_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(got) == ids  # every job exactly once


def test_stale_lease_is_requeued_without_spending_an_attempt(
    factory: sessionmaker[Session],
):
    # Lost leases have their own cap (tests/workers/test_job_leases.py).
    (job_id,) = _enqueue(factory, 1, max_attempts=1)
    assert _claim(factory, "dead", lease=-1) is not None  # a lease already expired
    claim = _claim(factory, "w2", lease=-1)  # requeued, claimed again: still attempt 1
    assert claim is not None and claim.job_id == job_id
    assert (claim.attempt, claim.lease_losses) == (1, 1)
    with transaction(factory) as s:
        assert job_queue.requeue_stale(s) == 1
    job = _job(factory, job_id)
    assert (job.status, job.attempts, job.lease_losses) == ("queued", 0, 2)
    with transaction(factory) as s:  # the dead owner can no longer write anything
        assert not job_queue.heartbeat(s, job_id, "dead", lease_seconds=60)
        assert not job_queue.set_progress(s, job_id, "dead", 1, 2)
        assert not job_queue.finish(s, job_id, "dead", {})


def test_heartbeat_extends_the_lease_and_progress_is_recorded(factory: sessionmaker[Session]):
    (job_id,) = _enqueue(factory, 1)
    claim = _claim(factory, "w", lease=5)
    assert claim is not None
    before = _job(factory, job_id).lease_expires_at
    with transaction(factory) as s:
        assert job_queue.heartbeat(s, job_id, "w", lease_seconds=600)
        assert job_queue.set_progress(s, job_id, "w", 3, 10)
    job = _job(factory, job_id)
    assert job.lease_expires_at is not None and before is not None
    assert job.lease_expires_at - before > timedelta(seconds=500)
    assert (job.progress_done, job.progress_total) == (3, 10)
    with transaction(factory) as s:
        assert job_queue.finish(s, job_id, "w", {"ok": 1})
    job = _job(factory, job_id)
    assert (job.status, job.result, job.lease_owner) == ("done", {"ok": 1}, None)


def test_failures_retry_up_to_the_maximum(factory: sessionmaker[Session]):
    (job_id,) = _enqueue(factory, 1, max_attempts=2)
    for expected in ("queued", "failed"):
        claim = _claim(factory, "w")
        assert claim is not None
        with transaction(factory) as s:
            assert job_queue.fail(s, job_id, "w", "boom") == expected
    assert _claim(factory, "w") is None
    with transaction(factory) as s:
        job_queue.retry(s, job_id)
    claim = _claim(factory, "w")
    assert claim is not None and claim.attempt == 1  # a retry starts a fresh set of attempts


def test_cancel_stops_the_owner_and_only_finished_jobs_retry(factory: sessionmaker[Session]):
    (job_id,) = _enqueue(factory, 1)
    assert _claim(factory, "w") is not None
    with transaction(factory) as s, pytest.raises(Conflict):
        job_queue.retry(s, job_id)
    with transaction(factory) as s:
        assert job_queue.cancel(s, job_id).status == "cancelled"
    with transaction(factory) as s:
        assert not job_queue.heartbeat(s, job_id, "w", lease_seconds=60)
        assert not job_queue.is_owned(s, job_id, "w")
        with pytest.raises(Conflict):
            job_queue.cancel(s, job_id)


def test_release_requeues_without_spending_an_attempt(factory: sessionmaker[Session]):
    (job_id,) = _enqueue(factory, 1, max_attempts=1)
    assert _claim(factory, "w") is not None
    with transaction(factory) as s:
        assert job_queue.release(s, job_id, "w")
    job = _job(factory, job_id)
    assert (job.status, job.attempts) == ("queued", 0)
    assert _claim(factory, "w2") is not None


def test_requeue_ignores_live_leases(factory: sessionmaker[Session]):
    _enqueue(factory, 1)
    assert _claim(factory, "w") is not None
    with transaction(factory) as s:
        assert job_queue.requeue_stale(s, utcnow()) == 0
        assert job_queue.active_jobs_exist(s)


def test_read_then_write_transactions_survive_a_concurrent_writer(settings: Settings, engine: Any):
    """A read-then-write transaction beside another writer waits for it instead of failing.

    A worker's batch commit reads (is the job still mine?) and then writes while its heartbeat
    thread commits on another connection; on SQLite a deferred transaction would fail at once
    with "database is locked". Write transactions start IMMEDIATE.
    """
    store = Store(settings=settings, engine=engine, factory=session_factory(engine))
    (job_id,) = _enqueue(store.factory, 1)
    read_done, written = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def batch() -> None:
        try:
            with transaction(store.write_factory) as s:
                job_queue.get_job(s, job_id)  # the read
                read_done.set()
                written.wait(timeout=0.5)  # the heartbeat commits now (or waits for us)
                s.get_one(Job, job_id).progress_done = 5  # the write
        except BaseException as exc:
            errors.append(exc)

    def heartbeat() -> None:
        read_done.wait()
        try:
            with transaction(store.write_factory) as s:
                s.get_one(Job, job_id).progress_total = 9
            written.set()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=batch), threading.Thread(target=heartbeat)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    job = _job(store.factory, job_id)
    assert (job.progress_done, job.progress_total) == (5, 9)
