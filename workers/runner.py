"""The job runner: claim a job, keep its lease alive, dispatch to its handler, record the outcome.

One transaction per step, never one held during model computation. A handler reports progress
and writes its results per batch through :class:`JobContext`, which stops it when the job was
cancelled, its lease was lost, or the worker was asked to stop.
"""

from __future__ import annotations

import os
import socket
import threading
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from app.db import transaction
from app.errors import AppellateError
from app.services import jobs
from app.store import Store

T = TypeVar("T")
Handler = Callable[["JobContext"], dict[str, Any]]


class JobStopped(Exception):
    """The job must stop now: cancelled, lease lost, or the worker is shutting down."""


def worker_name() -> str:
    """A lease owner name unique to this process and claim loop: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class JobContext:
    """What a handler gets: the job, the store, the device, and per-batch commit and progress."""

    store: Store
    claim: jobs.Claim
    device: str
    shutdown: threading.Event
    lease_lost: threading.Event = field(default_factory=threading.Event)
    cache: dict[Any, Any] = field(default_factory=dict)

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
        after a crash can redo a batch whose commit never happened.

        Raises
        ------
        JobStopped
            If the job was cancelled or taken over (nothing is written), or the worker is
            stopping (the batch is written first).

        """
        with transaction(self.store.write_factory) as session:
            if not jobs.is_owned(session, self.claim.job_id, self.claim.owner):
                self.lease_lost.set()
                raise JobStopped
            out = work(session)
            if done is not None:
                jobs.set_progress(session, self.claim.job_id, self.claim.owner, done, total)
        self.check()
        return out

    def progress(self, done: int, total: int | None) -> None:
        """Record progress without results (e.g. the total, before the first batch)."""
        with transaction(self.store.write_factory) as session:
            if not jobs.set_progress(session, self.claim.job_id, self.claim.owner, done, total):
                self.lease_lost.set()
        self.check()

    def read(self, work: Callable[[Session], T]) -> T:
        """Run a short read-only transaction (inputs are read before computing, never during)."""
        with transaction(self.store.factory) as session:
            return work(session)


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
                    ok = jobs.heartbeat(
                        session,
                        self.ctx.claim.job_id,
                        self.ctx.claim.owner,
                        lease_seconds=self.lease_seconds,
                    )
            except Exception:
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

    def claim(self, job_id: int | None = None) -> jobs.Claim | None:
        """Claim the next job this worker can run (or exactly ``job_id``)."""
        with transaction(self.store.write_factory) as session:
            return jobs.claim(
                session,
                worker_name(),
                lease_seconds=self.lease_seconds,
                kinds=sorted(self.handlers),
                job_id=job_id,
            )

    def run(self, *, once: bool = False) -> int:
        """Run jobs until shutdown (with ``once``: until the queue is empty); return the count."""
        count = 0
        while not self.shutdown.is_set():
            claimed = self.claim()
            if claimed is None:
                if once:
                    break
                self.shutdown.wait(self.poll_seconds)
                continue
            self.execute(claimed)
            count += 1
        return count

    def execute(self, claimed: jobs.Claim) -> str:
        """Run one claimed job to its outcome; returns what happened (done, stopped, failed...)."""
        # Imported here: the runner itself never needs torch (the handlers load it anyway).
        from workers.capture import set_torch_threads

        set_torch_threads(self.store.settings.worker_threads)
        ctx = JobContext(self.store, claimed, self.device, self.shutdown, cache=self.cache)
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
            detail = "".join(traceback.format_exception_only(exc)).strip()
            return self._failed(claimed, detail, final=False)
        finally:
            beat.stopped.set()
            beat.join()
        with transaction(self.store.write_factory) as session:
            ok = jobs.finish(session, claimed.job_id, claimed.owner, result)
        self.log(f"job {claimed.job_id}: {'done' if ok else 'finished after losing its lease'}")
        return "done" if ok else "lost"

    def _failed(self, claimed: jobs.Claim, detail: str, *, final: bool) -> str:
        with transaction(self.store.write_factory) as session:
            status = jobs.fail(session, claimed.job_id, claimed.owner, detail, final=final)
        self.log(f"job {claimed.job_id}: {detail} -> {status}")
        return status or "lost"

    def _stopped(self, ctx: JobContext) -> str:
        if self.shutdown.is_set() and not ctx.lease_lost.is_set():
            with transaction(self.store.write_factory) as session:
                jobs.release(session, ctx.claim.job_id, ctx.claim.owner)
            self.log(f"job {ctx.claim.job_id}: stopped by shutdown, back in the queue")
            return "released"
        self.log(f"job {ctx.claim.job_id}: stopped (cancelled or lease lost)")
        return "stopped"


def _attempt(claimed: jobs.Claim) -> str:
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
