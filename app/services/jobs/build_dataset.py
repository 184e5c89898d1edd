"""The ``build_dataset`` job kind: build one of the lie-detector datasets from bundled data.

The builders live in :mod:`app.ingest.lie.builders`, keyed by :data:`BUILDER_NAMES`; they only
touch the database, so the worker runs one as a single transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.errors import InvalidInput
from app.services.jobs.kind import JobParams, job_kind

BUILDER_NAMES = ("truth", "confounders", "personas", "roleplay")


@job_kind
@dataclass(frozen=True)
class BuildDatasetParams(JobParams):
    """Which builder, from which data folder (None: the bundled data), with which options."""

    kind = "build_dataset"
    title = "Build a lie-detector dataset"

    builder: str
    data: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """A known builder."""
        if self.builder not in BUILDER_NAMES:
            raise InvalidInput(f"must be one of {', '.join(BUILDER_NAMES)}", field="builder")

    def describe(self) -> str:
        """E.g. "Build the lie-detector dataset personas (bundled data)"."""
        where = self.data or "bundled data"
        return f"Build the lie-detector dataset {self.builder} ({where})"
