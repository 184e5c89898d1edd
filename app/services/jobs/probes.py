"""Probe and dataset jobs asked for by name: check that what they name exists, then queue them."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labelled_items import get_detector
from app.services.evidence.language_models import get_language_model
from app.services.jobs import queue as job_queue
from app.tables import Job

FIT_PROBE_JOB = "fit_probe"
FIT_LIE_PROBE_JOB = "fit_lie_probe"
APPLY_PROBE_JOB = "apply_probe"
FIT_SET_PROBE_JOB = "fit_set_probe"


def queue_probe_job(
    session: Session,
    kind: str,
    params: dict[str, Any],
    *,
    benchmark: str | None = None,
    detector: str | None = None,
    model: str | None = None,
) -> Job:
    """Queue a ``kind`` job once the named benchmark, detector and model are known to exist.

    Raises
    ------
    NotFound
        One of them does not exist (nothing is queued).

    """
    if benchmark is not None:
        get_benchmark(session, benchmark)
    if detector is not None:
        get_detector(session, detector)
    if model is not None:
        get_language_model(session, model)
    return job_queue.enqueue(session, kind, params)
