"""Kept arrays: label columns, detector scores and sorted table orders per evidence version.

What the first request after an import or a restart of a big benchmark would otherwise read
row by row (issue 21 item 22, issue 23's cleanlab mode); a benchmark's deletion takes them
with it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03 22:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision: create ``kept_arrays``."""
    op.create_table(
        "kept_arrays",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=400), nullable=False),
        sa.Column("evidence_version", sa.Integer(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["benchmark_id"],
            ["benchmarks.id"],
            name=op.f("fk_kept_arrays_benchmark_id_benchmarks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kept_arrays")),
        sa.UniqueConstraint(
            "benchmark_id",
            "name",
            "evidence_version",
            name=op.f("uq_kept_arrays_benchmark_id_name_evidence_version"),
        ),
    )


def downgrade() -> None:
    """Revert this revision: drop ``kept_arrays``."""
    op.drop_table("kept_arrays")
