"""The job runner: claim a job, keep its lease alive, dispatch to its handler, record the outcome.

One transaction per step, never one held during model computation. A handler reports progress
and writes its results per batch through :class:`JobContext`, which stops it when the job was
cancelled, its lease was lost, or the worker was asked to stop.

A batch's transaction locks the job's row before checking the lease, so no other worker can
requeue or claim the job between that check and the commit (two owners never write at once).
Lost database connections (a server restart, a killed backend) and lock conflicts are
retried with backoff, the whole transaction again, for up to a lease; a worker cut off longer
leaves its job to the lease (a lost lease, not a failed attempt) and keeps polling.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import AppellateError
from app.services.jobs import queue as job_queue
from app.services.jobs.kind import JobParams
from app.services.jobs.live_progress import write_live_progress
from app.store import Store
from app.tables import Job

T = TypeVar("T")
Handler = Callable[["JobContext"], dict[str, Any]]
_HANDLERS: dict[str, Handler] = {}


def handles(params_type: type[JobParams]) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``params_type``'s job kind.

    One handler per kind, in a module of :mod:`workers.jobs` (:mod:`workers.dispatch` imports
    them all).
    """

    def register(handler: Handler) -> Handler:
        known = _HANDLERS.get(params_type.kind)
        if known is not None and known is not handler:
            raise RuntimeError(f"job kind {params_type.kind!r} has two handlers")
        _HANDLERS[params_type.kind] = handler
        return handler

    return register


def registered_handlers() -> dict[str, Handler]:
    """The handlers registered so far (see :func:`workers.dispatch.all_handlers`)."""
    return dict(_HANDLERS)


class JobStopped(Exception):
    """The job must stop now: cancelled, lease lost, or the worker is shutting down."""


# Backoff between retries of a transaction that met a transient database error.
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 2.0


def is_transient(exc: BaseException) -> bool:
    """Whether a database error may pass on retry: a lost connection, a deadlock, a lock wait.

    SQLAlchemy raises OperationalError for those (psycopg's server-closed connection, a killed
    backend, PostgreSQL's deadlock and serialization failures, SQLite's "database is locked"),
    and flags any error on a connection it found dead as ``connection_invalidated``.
    """
    return isinstance(exc, OperationalError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )


def _brief(exc: BaseException) -> str:
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]


def in_retried_transaction(
    factory: sessionmaker[Session],
    work: Callable[[Session], T],
    *,
    budget_s: float,
    log: Callable[[str], None],
) -> T:
    """Run ``work`` in one transaction, again from the start after a transient error.

    ``work`` must be safe to repeat (a failed COMMIT may have committed): job writes are
    idempotent by contract (:meth:`JobContext.commit`). The pool's pre-ping replaces dead
    connections on the next checkout.

    Raises
    ------
    sqlalchemy.exc.DBAPIError
        A non-transient error at once; a transient one still failing after ``budget_s``.

    """
    deadline = time.monotonic() + budget_s
    delay = RETRY_FIRST_S
    while True:
        try:
            with transaction(factory) as session:
                return work(session)
        except DBAPIError as exc:
            if not is_transient(exc) or time.monotonic() + delay > deadline:
                raise
            log(f"database error, retrying in {delay:.1f} s: {_brief(exc)}")
            time.sleep(delay)
            delay = min(2 * delay, RETRY_MAX_S)


def _hold(session: Session, job_id: int, owner: str) -> bool:
    """Lock the job's row, then whether ``owner`` still holds it (for a batch's transaction).

    The row lock lasts until the batch commits: a claim skips locked rows and a requeue of a
    stale lease waits, so the lease cannot change hands between this check and the writes.
    (SQLite's IMMEDIATE write transactions serialise the same way; FOR UPDATE is dropped there.)
    """
    session.execute(select(Job.id).where(Job.id == job_id).with_for_update())
    return job_queue.is_owned(session, job_id, owner)


def worker_name() -> str:
    """A lease owner name unique to this process and claim loop: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class JobContext:
    """What a handler gets: the job, the store, the device, and per-batch commit and progress."""

    store: Store
    claim: job_queue.Claim
    device: str
    shutdown: threading.Event
    lease_lost: threading.Event = field(default_factory=threading.Event)
    cache: dict[Any, Any] = field(default_factory=dict)
    # How long a transaction is retried after transient database errors (a lease: after that
    # the job may be another worker's anyway).
    retry_s: float = 60.0
    log: Callable[[str], None] = print

    @property
    def params(self) -> dict[str, Any]:
        """The job's parameters as enqueued."""
        return self.claim.params

    def check(self) -> None:
        """Raise :class:`JobStopped` if the job should stop before its next batch."""
        if self.shutdown.is_set() or self.lease_lost.is_set():
            raise JobStopped

    def commit(
        self, work: Callable[[Session], T], *, done: int | None = None, total: int | None = None
    ) -> T:
        """Write one batch's results and its progress in one transaction, if the job is still ours.

        Results written here must be idempotent (skip rows that exist), so that a job resumed
        after a crash can redo a batch whose commit never happened, and a transaction cut off
        by a lost connection can be run again. The job's row is locked while ``work`` runs.

        Raises
        ------
        JobStopped
            If the job was cancelled or taken over (nothing is written), or the worker is
            stopping (the batch is written first).

        """

        def batch(session: Session) -> T:
            if not _hold(session, self.claim.job_id, self.claim.owner):
                self.lease_lost.set()
                raise JobStopped
            out = work(session)
            if done is not None:
                job_queue.set_progress(session, self.claim.job_id, self.claim.owner, done, total)
            return out

        out = self._retried(self.store.write_factory, batch)
        self.check()
        return out

    def progress(self, done: int, total: int | None) -> None:
        """Record progress without results (e.g. the total, before the first batch)."""

        def record(session: Session) -> bool:
            return job_queue.set_progress(session, self.claim.job_id, self.claim.owner, done, total)

        if not self._retried(self.store.write_factory, record):
            self.lease_lost.set()
        self.check()

    def progress_aside(self, done: int, total: int | None) -> None:
        """Record progress from inside this job's own long transaction (one import, say).

        That transaction holds the database (SQLite's write lock, the job's row on PostgreSQL),
        so the progress goes to a file the job page reads (:mod:`app.services.jobs.live_progress`)
        instead of a second transaction that would wait for the first. Cheap: call it a few
        times a second at most.
        """
        write_live_progress(self.store.settings.data_dir, self.claim.job_id, done, total)

    def read(self, work: Callable[[Session], T]) -> T:
        """Run a short read-only transaction (inputs are read before computing, never during)."""
        return self._retried(self.store.factory, work)

    def _retried(self, factory: sessionmaker[Session], work: Callable[[Session], T]) -> T:
        def log(line: str) -> None:
            self.log(f"job {self.claim.job_id}: {line}")

        return in_retried_transaction(factory, work, budget_s=self.retry_s, log=log)


class _Heartbeat(threading.Thread):
    """Extends the lease every third of its length; flags the context when the job is lost."""

    def __init__(self, ctx: JobContext, lease_seconds: float) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{ctx.claim.job_id}")
        self.ctx = ctx
        self.lease_seconds = lease_seconds
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.lease_seconds / 3):
            try:
                with transaction(self.ctx.store.write_factory) as session:
                    ok = job_queue.heartbeat(
                        session,
                        self.ctx.claim.job_id,
                        self.ctx.claim.owner,
                        lease_seconds=self.lease_seconds,
                    )
            except Exception as exc:
                # Retried at the next beat; a lease that runs out meanwhile is lost.
                self.ctx.log(f"job {self.ctx.claim.job_id}: heartbeat failed: {_brief(exc)}")
                continue
            if not ok:
                self.ctx.lease_lost.set()
                return


@dataclass
class Worker:
    """A claim loop over the job kinds it has handlers for.

    Parameters
    ----------
    store
        The opened store.
    handlers
        Job kind -> handler.
    device
        ``auto``, ``cpu`` or ``cuda:N``, passed to handlers.
    lease_seconds
        Lease length; a worker silent for this long loses its job to another.
    poll_seconds
        Wait between empty claims.

    """

    store: Store
    handlers: dict[str, Handler]
    device: str = "auto"
    lease_seconds: float = 60.0
    poll_seconds: float = 1.0
    shutdown: threading.Event = field(default_factory=threading.Event)
    log: Callable[[str], None] = print
    # Loaded models and other per-process state shared by the jobs this worker runs.
    cache: dict[Any, Any] = field(default_factory=dict)

    def claim(self, job_id: int | None = None) -> job_queue.Claim | None:
        """Claim the next job this worker can run (or exactly ``job_id``)."""
        with transaction(self.store.write_factory) as session:
            return job_queue.claim(
                session,
                worker_name(),
                lease_seconds=self.lease_seconds,
                kinds=sorted(self.handlers),
                job_id=job_id,
            )

    def run(self, *, once: bool = False) -> int:
        """Run jobs until shutdown (with ``once``: until the queue is empty); return the count.

        A database that cannot be reached does not end the loop: the claim is tried again with
        backoff (up to ``poll_seconds`` apart, at least :data:`RETRY_MAX_S`) until it answers.
        """
        count = 0
        delay = RETRY_FIRST_S
        while not self.shutdown.is_set():
            try:
                claimed = self.claim()
            except DBAPIError as exc:
                if not is_transient(exc):
                    raise
                self.log(f"worker: database error, claiming again in {delay:.1f} s: {_brief(exc)}")
                self.shutdown.wait(delay)
                delay = min(2 * delay, max(RETRY_MAX_S, self.poll_seconds))
                continue
            delay = RETRY_FIRST_S
            if claimed is None:
                if once:
                    break
                self.shutdown.wait(self.poll_seconds)
                continue
            self.execute(claimed)
            count += 1
        return count

    def execute(self, claimed: job_queue.Claim) -> str:
        """Run one claimed job to its outcome; returns what happened (done, stopped, failed...)."""
        # Imported here: the runner itself never needs torch (the handlers load it anyway).
        from workers.engines.capture import set_torch_threads

        set_torch_threads(self.store.settings.worker_threads)
        ctx = JobContext(
            self.store,
            claimed,
            self.device,
            self.shutdown,
            cache=self.cache,
            retry_s=self.lease_seconds,
            log=self.log,
        )
        beat = _Heartbeat(ctx, self.lease_seconds)
        beat.start()
        self.log(f"job {claimed.job_id} ({claimed.kind}) {_attempt(claimed)}: started")
        try:
            result = self.handlers[claimed.kind](ctx)
        except JobStopped:
            return self._stopped(ctx)
        except AppellateError as exc:
            # Bad parameters or input: another attempt would fail the same way.
            return self._failed(claimed, exc.message, final=True)
        except Exception as exc:
            if is_transient(exc):
                # Cut off from the database for a whole lease: not the job's fault. The lease
                # runs out and the job is claimed again (by us, once the database is back).
                return self._cut_off(claimed, exc)
            detail = "".join(traceback.format_exception_only(exc)).strip()
            return self._failed(claimed, detail, final=False)
        finally:
            beat.stopped.set()
            beat.join()
        ok = self._write(
            claimed, lambda s: job_queue.finish(s, claimed.job_id, claimed.owner, result)
        )
        self.log(f"job {claimed.job_id}: {'done' if ok else 'finished after losing its lease'}")
        return "done" if ok else "lost"

    def _write(self, claimed: job_queue.Claim, work: Callable[[Session], T]) -> T | None:
        """An outcome's transaction, retried for a lease; None when the database stayed away."""
        try:
            return in_retried_transaction(
                self.store.write_factory, work, budget_s=self.lease_seconds, log=self.log
            )
        except DBAPIError as exc:
            if not is_transient(exc):
                raise
            self._cut_off(claimed, exc)
            return None

    def _cut_off(self, claimed: job_queue.Claim, exc: BaseException) -> str:
        self.log(f"job {claimed.job_id}: database unreachable, left to its lease: {_brief(exc)}")
        return "lost"

    def _failed(self, claimed: job_queue.Claim, detail: str, *, final: bool) -> str:
        status = self._write(
            claimed, lambda s: job_queue.fail(s, claimed.job_id, claimed.owner, detail, final=final)
        )
        self.log(f"job {claimed.job_id}: {detail} -> {status}")
        return status or "lost"

    def _stopped(self, ctx: JobContext) -> str:
        if self.shutdown.is_set() and not ctx.lease_lost.is_set():
            claimed = ctx.claim
            self._write(claimed, lambda s: job_queue.release(s, claimed.job_id, claimed.owner))
            self.log(f"job {ctx.claim.job_id}: stopped by shutdown, back in the queue")
            return "released"
        self.log(f"job {ctx.claim.job_id}: stopped (cancelled or lease lost)")
        return "stopped"


def _attempt(claimed: job_queue.Claim) -> str:
    """``attempt N``, and the leases lost before it (workers killed under the job) if any."""
    n = claimed.lease_losses
    lost = f" after {n} lost lease{'s' if n != 1 else ''}" if n else ""
    return f"attempt {claimed.attempt}{lost}"


def known_kinds(handlers: dict[str, Handler], wanted: Iterable[str] | None) -> dict[str, Handler]:
    """The handlers for ``wanted`` kinds (all when None).

    Raises
    ------
    ValueError
        If a wanted kind has no handler.

    """
    if not wanted:
        return dict(handlers)
    unknown = sorted(set(wanted) - set(handlers))
    if unknown:
        raise ValueError(f"unknown job kinds {unknown}; known: {sorted(handlers)}")
    return {k: handlers[k] for k in wanted}
