"""Job-kind tests' fixture: a store holding what every kind can be started on."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tests.support.job_targets import seed_job_targets


@pytest.fixture
def targets(factory: sessionmaker[Session], tmp_path: Path) -> sessionmaker[Session]:
    """The test store with :func:`~tests.support.job_targets.seed_job_targets` in it."""
    seed_job_targets(factory, tmp_path)
    return factory
