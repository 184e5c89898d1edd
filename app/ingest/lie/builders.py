"""The lie-detector dataset builders the ``build_dataset`` job kind names, run through the queue.

Builders only touch the database (no model), so the job is one transaction; queuing them lets
the dashboard start a build and show its outcome on the jobs page like any other work.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.lie.datasets import (
    build_confounders,
    build_personas,
    build_roleplay,
    build_truth,
)
from app.ingest.records import ImportSummary
from app.services.jobs.build_dataset import BuildDatasetParams
from app.settings import BUNDLED_DATA


def _truth(session: Session, data: Path, options: dict[str, Any]) -> list[ImportSummary]:
    return [build_truth(session, data, **options)]


def _confounders(session: Session, data: Path, options: dict[str, Any]) -> list[ImportSummary]:
    return build_confounders(session, data, **options)


def _personas(session: Session, _data: Path, options: dict[str, Any]) -> list[ImportSummary]:
    return [build_personas(session, **options)]


def _roleplay(session: Session, data: Path, options: dict[str, Any]) -> list[ImportSummary]:
    return [build_roleplay(session, data, **options)]


# Keyed by the names the job kind declares (app.services.jobs.build_dataset.BUILDER_NAMES).
BUILDERS: dict[str, Callable[[Session, Path, dict[str, Any]], list[ImportSummary]]] = {
    "truth": _truth,
    "confounders": _confounders,
    "personas": _personas,
    "roleplay": _roleplay,
}


def build_dataset(session: Session, params: BuildDatasetParams) -> list[str]:
    """Run the builder ``params.builder`` with ``params.options``; one line per benchmark.

    Raises
    ------
    InvalidInput
        For an option the builder does not take.

    """
    data = Path(params.data or BUNDLED_DATA)
    try:
        summaries = BUILDERS[params.builder](session, data, dict(params.options))
    except TypeError as exc:  # an option the builder does not take
        raise InvalidInput(str(exc), field="options") from None
    return [s.line() for s in summaries]
