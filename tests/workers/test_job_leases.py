"""Lost leases (a worker killed or cut off) are counted apart from failed attempts of a job's code.

A worker killed three times must not use up a job's three attempts: the job's code never failed.
Lost leases have their own, larger cap, so a job that kills every worker still ends.
"""

from __future__ import annotations

import pytest
import typer
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.db import transaction
from app.services.evidence.language_models import register_language_model
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.tables import Job
from tests.support.factories import PAIRWISE, seed_benchmarks
from tests.support.job_support import store_on
from workers.cli.jobs import extract, judge
from workers.runner import Worker


def _enqueue(factory: sessionmaker[Session], max_attempts: int = 3) -> int:
    with transaction(factory) as s:
        return job_queue.enqueue(s, "judge", {}, max_attempts=max_attempts).id


def _lose_lease(factory: sessionmaker[Session], owner: str) -> job_queue.Claim:
    """Claim the job under a lease that has already expired: its worker is as good as dead."""
    with transaction(factory) as s:
        claim = job_queue.claim(s, owner, lease_seconds=-1)
    assert claim is not None
    return claim


def _job(factory: sessionmaker[Session], job_id: int) -> Job:
    with transaction(factory) as s:
        return job_queue.get_job(s, job_id)


def test_a_job_whose_worker_is_killed_three_times_still_runs(
    factory: sessionmaker[Session],
) -> None:
    job_id = _enqueue(factory, max_attempts=3)
    for k in range(3):
        _lose_lease(factory, f"killed-{k}")
    with transaction(factory) as s:
        claim = job_queue.claim(s, "survivor", lease_seconds=60)
    assert claim is not None and claim.job_id == job_id
    assert (claim.attempt, claim.lease_losses) == (1, 3)
    job = _job(factory, job_id)
    assert (job.status, job.attempts, job.lease_losses) == ("running", 1, 3)
    # The code's own failures still count against max_attempts.
    for expected in ("queued", "queued", "failed"):
        with transaction(factory) as s:
            assert job_queue.fail(s, job_id, claim.owner, "boom") == expected
        with transaction(factory) as s:
            claim = job_queue.claim(s, "survivor", lease_seconds=60) or claim
    assert _job(factory, job_id).attempts == 3


def test_lost_leases_have_their_own_cap_and_separated_messages(
    factory: sessionmaker[Session],
) -> None:
    job_id = _enqueue(factory, max_attempts=1)
    for k in range(job_queue.MAX_LEASE_LOSSES):
        _lose_lease(factory, f"killed-{k}")
    assert _job(factory, job_id).status == "running"
    with transaction(factory) as s:
        assert job_queue.requeue_stale(s) == 1
        assert job_queue.claim(s, "late", lease_seconds=60) is None
    job = _job(factory, job_id)
    assert (job.status, job.lease_losses, job.attempts) == (
        "failed",
        job_queue.MAX_LEASE_LOSSES,
        0,
    )
    assert job.error == job_queue.lease_loss_message()
    # A retry starts afresh: fresh attempts and a fresh lease allowance.
    with transaction(factory) as s:
        job_queue.retry(s, job_id)
    assert (_job(factory, job_id).attempts, _job(factory, job_id).lease_losses) == (0, 0)


def test_a_failure_then_lost_leases_keep_both_messages_apart(
    factory: sessionmaker[Session],
) -> None:
    job_id = _enqueue(factory, max_attempts=2)
    with transaction(factory) as s:
        claim = job_queue.claim(s, "w", lease_seconds=60)
    assert claim is not None
    with transaction(factory) as s:
        assert job_queue.fail(s, job_id, "w", "RuntimeError: boom") == "queued"
    for k in range(job_queue.MAX_LEASE_LOSSES):
        _lose_lease(factory, f"killed-{k}")
    with transaction(factory) as s:
        job_queue.requeue_stale(s)
    job = _job(factory, job_id)
    assert (job.status, job.attempts) == ("failed", 1)
    assert job.error == f"RuntimeError: boom; {job_queue.lease_loss_message()}"


def test_the_runner_logs_lost_leases_with_the_attempt(
    settings: Settings, engine: object, factory: sessionmaker[Session]
) -> None:
    store = store_on(settings, engine)  # type: ignore[arg-type]
    job_id = _enqueue(factory, max_attempts=1)
    _lose_lease(factory, "killed")
    lines: list[str] = []
    worker = Worker(store, {"judge": lambda ctx: {"ok": 1}}, device="cpu", log=lines.append)
    assert worker.run(once=True) == 1
    assert _job(factory, job_id).status == "done"
    assert any("attempt 1" in line and "1 lost lease" in line for line in lines), lines


@pytest.fixture
def cli(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    app = typer.Typer()
    app.callback()(lambda: None)
    app.command("judge")(judge)
    app.command("extract")(extract)
    return app


def test_judge_and_extract_take_max_attempts(
    cli: typer.Typer, factory: sessionmaker[Session]
) -> None:
    seed_benchmarks(factory)
    with transaction(factory) as s:
        register_language_model(s, "m", path="/nowhere", fingerprint="f", dtype="float32")
    runner = CliRunner()
    judged = runner.invoke(cli, ["judge", PAIRWISE, "--model", "m", "--max-attempts", "7"])
    assert judged.exit_code == 0, judged.output
    extracted = runner.invoke(cli, ["extract", PAIRWISE, "--model", "m", "--max-attempts", "2"])
    assert extracted.exit_code == 0, extracted.output
    default = runner.invoke(cli, ["extract", PAIRWISE, "--model", "m", "--name", "other"])
    assert default.exit_code == 0, default.output
    with transaction(factory) as s:
        got = s.execute(select(Job.kind, Job.max_attempts).order_by(Job.id)).all()
    assert [tuple(r) for r in got] == [("judge", 7), ("extract", 2), ("extract", 3)]
    refused = runner.invoke(cli, ["judge", PAIRWISE, "--model", "m", "--max-attempts", "0"])
    assert refused.exit_code == 2
