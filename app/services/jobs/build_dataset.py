"""The ``build_dataset`` job kind: build one of the lie-detector datasets from the bundled data.

The builders themselves live in :mod:`app.ingest.lie.builders` (keyed by these names); they
only touch the database, so the worker runs one as a single transaction.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.jobs import queue as job_queue
from app.tables import Job

BUILD_DATASET_JOB = "build_dataset"
BUILDER_NAMES = ("truth", "confounders", "personas", "roleplay")


def queue_dataset_build(session: Session, builder: str) -> Job:
    """Queue one of the lie-detector dataset builders (bundled data, default options).

    Raises
    ------
    InvalidInput
        An unknown builder.

    """
    if builder not in BUILDER_NAMES:
        raise InvalidInput(f"must be one of {', '.join(BUILDER_NAMES)}", field="builder")
    return job_queue.enqueue(session, BUILD_DATASET_JOB, {"builder": builder})
