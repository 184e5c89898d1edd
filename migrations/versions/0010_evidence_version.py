"""Benchmarks' evidence version: bumped by every write but review events.

Votes, adjudications and withdrawals bump ``data_version`` only, so ranked disagreement lists
and metrics on original labels, keyed on ``evidence_version``, survive a review session
(issue 14). Existing benchmarks start at their ``data_version``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 11:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision: add ``benchmarks.evidence_version``."""
    with op.batch_alter_table("benchmarks") as batch:
        batch.add_column(
            sa.Column("evidence_version", sa.Integer(), nullable=False, server_default="0")
        )
    # A stored result keyed on an older version is never mistaken for a current one: starting
    # from data_version, the evidence version only grows past every version already used.
    op.execute("UPDATE benchmarks SET evidence_version = data_version")


def downgrade() -> None:
    """Revert this revision: drop ``benchmarks.evidence_version``."""
    with op.batch_alter_table("benchmarks") as batch:
        batch.drop_column("evidence_version")
