"""Helpers for job tests: a store over the test engine, a registered tiny model, run a job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from app.db import session_factory, transaction
from app.services.evidence.language_models import register_language_model
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.store import Store
from workers.dispatch import HANDLERS
from workers.engines.models import describe_model
from workers.runner import Worker


def store_on(settings: Settings, engine: Engine) -> Store:
    """A store on the test engine (the engine fixture empties the tables afterwards)."""
    return Store(settings=settings, engine=engine, factory=session_factory(engine))


def register_tiny(store: Store, model_dir: Path, name: str = "tiny") -> None:
    """Register the session's tiny model (float32) as ``name``."""
    info = describe_model(model_dir)
    with transaction(store.factory) as s:
        register_language_model(
            s, name, path=str(model_dir), fingerprint=info.fingerprint, dtype="float32"
        )


def run_queue(store: Store) -> int:
    """Run every queued job in this process on the CPU; the number run."""
    return Worker(store, HANDLERS, device="cpu", log=lambda _: None).run(once=True)


def run_job(store: Store, kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """Queue one job, run the queue, and return the job's result (it must be done)."""
    with transaction(store.factory) as s:
        job_id = job_queue.enqueue(s, kind, params).id
    run_queue(store)
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
    assert job.status == "done", job.error
    assert job.result is not None
    return job.result
