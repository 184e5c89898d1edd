"""Browser tests' shared record: which of them ran in this process (for the forms inventory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.form_support import RAN

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _record_run(request: pytest.FixtureRequest) -> None:
    """Note this test as run here (its submissions are checked by test_forms_inventory.py)."""
    name = getattr(request.node, "originalname", request.node.name)
    RAN.add((request.node.path.resolve().relative_to(ROOT).as_posix(), name))
