"""The job queue: enqueue, claim under a lease, heartbeat, progress, finish, retry and cancel.

Jobs are rows. A worker claims one with a single ``UPDATE ... RETURNING`` whose subquery takes
``FOR UPDATE SKIP LOCKED`` on PostgreSQL (the clause is dropped on SQLite, where the write lock
makes the update atomic anyway), so two workers never run the same job. Every write by the
worker names its lease owner: a worker whose lease was taken over or whose job was cancelled
changes nothing.

A claim whose lease expires (its worker was killed, lost its machine or its database
connection) is a *lost lease*, not a failed attempt: the job's code did not fail. Lost leases
are counted apart (``lease_losses``) under their own, larger cap (:data:`MAX_LEASE_LOSSES`), so
a job survives workers being killed under it, while one that kills every worker still ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, or_, select, update
from sqlalchemy.orm import Session

from app.errors import Conflict, InvalidInput
from app.sql.lookup import added, get_one
from app.tables import Job, JobStatus, utcnow

ACTIVE = (JobStatus.queued.value, JobStatus.running.value)
FINISHED = (JobStatus.done.value, JobStatus.failed.value, JobStatus.cancelled.value)
DEFAULT_MAX_ATTEMPTS = 3
# Workers killed under one job before it fails for good (its code never failed meanwhile).
MAX_LEASE_LOSSES = 20
# Between the messages a job's error accumulates.
ERROR_SEPARATOR = "; "


def lease_loss_message() -> str:
    """The error a job fails with when its lease was lost :data:`MAX_LEASE_LOSSES` times."""
    return f"lease lost {MAX_LEASE_LOSSES} times (worker killed or cut off each time); gave up"


@dataclass(frozen=True)
class Claim:
    """A job a worker now holds: id, kind, parameters, attempt number, lease owner, lost leases."""

    job_id: int
    kind: str
    params: dict[str, Any]
    attempt: int
    owner: str
    lease_losses: int = 0


def enqueue(
    session: Session, kind: str, params: dict[str, Any], *, max_attempts: int = DEFAULT_MAX_ATTEMPTS
) -> Job:
    """Add a queued job; flushed, never committed.

    Raises
    ------
    InvalidInput
        If ``max_attempts`` is below 1.

    """
    if max_attempts < 1:
        raise InvalidInput("max_attempts must be at least 1", field="max_attempts")
    job = Job(kind=kind, params=dict(params), max_attempts=max_attempts)
    return added(session, job)


def get_job(session: Session, job_id: int) -> Job:
    """The job with ``job_id`` (``NotFound`` if there is none)."""
    return get_one(session, Job, f"no job {job_id}", id=job_id)


def list_jobs(
    session: Session, *, status: str | None = None, kind: str | None = None, limit: int = 200
) -> list[Job]:
    """The newest ``limit`` jobs, optionally of one status and kind."""
    q = select(Job).order_by(Job.id.desc()).limit(limit)
    if status:
        q = q.where(Job.status == status)
    if kind:
        q = q.where(Job.kind == kind)
    return list(session.scalars(q))


def _appended(message: str) -> ColumnElement[str]:
    """``jobs.error`` with ``message`` added after a separator (just ``message`` when empty)."""
    return case(
        (func.coalesce(Job.error, "") == "", message),
        else_=Job.error + ERROR_SEPARATOR + message,
    )


def requeue_stale(session: Session, now: datetime | None = None) -> int:
    """Put running jobs whose lease expired back in the queue, or fail them at the lease cap.

    A worker that died (SIGKILL, lost machine) stops heart-beating; its job must not stay
    "running" forever. Its claim is a lost lease, not an attempt: ``attempts`` is given back
    and ``lease_losses`` counted; the job fails at :data:`MAX_LEASE_LOSSES`. Returns the number
    of jobs touched.
    """
    now = now or utcnow()
    stale = and_(Job.status == JobStatus.running.value, Job.lease_expires_at < now)
    lost = {
        "lease_owner": None,
        "lease_expires_at": None,
        "attempts": Job.attempts - 1,
        "lease_losses": Job.lease_losses + 1,
    }
    failed = session.execute(
        update(Job)
        .where(stale, Job.lease_losses + 1 >= MAX_LEASE_LOSSES)
        .values(
            **lost,
            status=JobStatus.failed.value,
            finished_at=now,
            error=_appended(lease_loss_message()),
        )
        .execution_options(synchronize_session=False)
    ).rowcount
    requeued = session.execute(
        update(Job)
        .where(stale)
        .values(**lost, status=JobStatus.queued.value)
        .execution_options(synchronize_session=False)
    ).rowcount
    return int(failed or 0) + int(requeued or 0)


def claim(
    session: Session,
    owner: str,
    *,
    lease_seconds: float,
    kinds: list[str] | None = None,
    job_id: int | None = None,
) -> Claim | None:
    """Take the oldest queued job (of ``kinds``, or exactly ``job_id``) under a lease.

    Stale leases are requeued first. Commit right after: the claim holds row locks until then.

    Parameters
    ----------
    session
        A session in its own short transaction.
    owner
        Unique name of the claiming worker (host, pid and a random part).
    lease_seconds
        How long the claim holds without a heartbeat.
    kinds
        Job kinds this worker can run (all when None).
    job_id
        Claim only this job (a CLI command running its own job).

    """
    now = utcnow()
    requeue_stale(session, now)
    pick = select(Job.id).where(Job.status == JobStatus.queued.value)
    if kinds:
        pick = pick.where(Job.kind.in_(kinds))
    if job_id is not None:
        pick = pick.where(Job.id == job_id)
    pick = pick.order_by(Job.id).limit(1).with_for_update(skip_locked=True)
    row = session.execute(
        update(Job)
        .where(Job.id == pick.scalar_subquery(), Job.status == JobStatus.queued.value)
        .values(
            status=JobStatus.running.value,
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            heartbeat_at=now,
            attempts=Job.attempts + 1,
            started_at=func.coalesce(Job.started_at, now),
        )
        .returning(Job.id, Job.kind, Job.params, Job.attempts, Job.lease_losses)
        .execution_options(synchronize_session=False)
    ).first()
    if row is None:
        return None
    job_id, kind, params, attempt, losses = row
    return Claim(job_id, kind, dict(params), attempt, owner, lease_losses=losses)


def _owned(job_id: int, owner: str) -> ColumnElement[bool]:
    return and_(Job.id == job_id, Job.lease_owner == owner, Job.status == JobStatus.running.value)


def heartbeat(session: Session, job_id: int, owner: str, *, lease_seconds: float) -> bool:
    """Extend the lease; False when the job is no longer this owner's (cancelled or taken over)."""
    now = utcnow()
    done = session.execute(
        update(Job)
        .where(_owned(job_id, owner))
        .values(heartbeat_at=now, lease_expires_at=now + timedelta(seconds=lease_seconds))
        .execution_options(synchronize_session=False)
    ).rowcount
    return bool(done)


def set_progress(session: Session, job_id: int, owner: str, done: int, total: int | None) -> bool:
    """Record ``done`` of ``total`` work units; False when the job is no longer this owner's."""
    updated = session.execute(
        update(Job)
        .where(_owned(job_id, owner))
        .values(progress_done=done, progress_total=total, heartbeat_at=utcnow())
        .execution_options(synchronize_session=False)
    ).rowcount
    return bool(updated)


def is_owned(session: Session, job_id: int, owner: str) -> bool:
    """Whether ``owner`` still holds the running job (checked inside a result transaction)."""
    return session.scalar(select(Job.id).where(_owned(job_id, owner))) is not None


def finish(session: Session, job_id: int, owner: str, result: dict[str, Any]) -> bool:
    """Mark the job done with its result; False when it was no longer this owner's."""
    updated = session.execute(
        update(Job)
        .where(_owned(job_id, owner))
        .values(
            status=JobStatus.done.value,
            result=result,
            error=None,
            finished_at=utcnow(),
            lease_owner=None,
            lease_expires_at=None,
        )
        .execution_options(synchronize_session=False)
    ).rowcount
    return bool(updated)


def fail(
    session: Session, job_id: int, owner: str, error: str, *, final: bool = False
) -> str | None:
    """Record a failed attempt: requeue while attempts remain (and not ``final``), else fail.

    Returns the new status, or None when the job was no longer this owner's.
    """
    job = session.scalar(select(Job).where(_owned(job_id, owner)).with_for_update())
    if job is None:
        return None
    job.error = error
    job.lease_owner = None
    job.lease_expires_at = None
    if final or job.attempts >= job.max_attempts:
        job.status = JobStatus.failed.value
        job.finished_at = utcnow()
    else:
        job.status = JobStatus.queued.value
    session.flush()
    return job.status


def release(session: Session, job_id: int, owner: str) -> bool:
    """Give a running job back to the queue without counting the attempt (graceful stop)."""
    updated = session.execute(
        update(Job)
        .where(_owned(job_id, owner))
        .values(
            status=JobStatus.queued.value,
            attempts=Job.attempts - 1,
            lease_owner=None,
            lease_expires_at=None,
        )
        .execution_options(synchronize_session=False)
    ).rowcount
    return bool(updated)


def cancel(session: Session, job_id: int) -> Job:
    """Cancel a queued or running job (a running worker stops at its next batch).

    Raises
    ------
    NotFound
        If there is no such job.
    Conflict
        If the job already finished.

    """
    job = get_job(session, job_id)
    if job.status not in ACTIVE:
        raise Conflict(
            f"job {job_id} is {job.status}; only queued or running jobs can be cancelled"
        )
    job.status = JobStatus.cancelled.value
    job.lease_owner = None
    job.lease_expires_at = None
    job.finished_at = utcnow()
    session.flush()
    return job


def retry(session: Session, job_id: int) -> Job:
    """Queue a failed or cancelled job again with a fresh set of attempts; results done so far stay.

    Raises
    ------
    NotFound
        If there is no such job.
    Conflict
        If the job is queued, running or done.

    """
    job = get_job(session, job_id)
    if job.status not in (JobStatus.failed.value, JobStatus.cancelled.value):
        raise Conflict(
            f"job {job_id} is {job.status}; only failed or cancelled jobs can be retried"
        )
    job.status = JobStatus.queued.value
    job.attempts = 0
    job.lease_losses = 0
    job.finished_at = None
    session.flush()
    return job


def active_jobs_exist(session: Session) -> bool:
    """Whether any job is queued or running (pages poll only while this holds)."""
    return (
        session.scalar(select(Job.id).where(or_(*(Job.status == s for s in ACTIVE))).limit(1))
        is not None
    )
