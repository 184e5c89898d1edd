"""Facet results: each benchmark's facets, kept per evidence version.

A server starting on a big benchmark reads its facets (counts, label sets, judges, scored
detectors, slices) instead of scanning it for them (issue 14); a benchmark's deletion takes
them with it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 21:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision: create ``facet_results``."""
    op.create_table(
        "facet_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("evidence_version", sa.Integer(), nullable=False),
        sa.Column("facets", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["benchmark_id"],
            ["benchmarks.id"],
            name=op.f("fk_facet_results_benchmark_id_benchmarks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_facet_results")),
        sa.UniqueConstraint(
            "benchmark_id",
            "evidence_version",
            name=op.f("uq_facet_results_benchmark_id_evidence_version"),
        ),
    )


def downgrade() -> None:
    """Revert this revision: drop ``facet_results``."""
    op.drop_table("facet_results")
