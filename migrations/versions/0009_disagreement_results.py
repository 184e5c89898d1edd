"""Disagreement results: each disagreement query's ranked list, kept per data version.

Every server process and every restart reads the list a page ranked once, so a warm page
does work in proportion to its rows (issue 14); a benchmark's deletion takes its lists with it.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision: create ``disagreement_results``."""
    op.create_table(
        "disagreement_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("params_key", sa.String(length=64), nullable=False),
        sa.Column("data_version", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(length=100), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("positive", sa.Text(), nullable=True),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("compute_seconds", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["benchmark_id"],
            ["benchmarks.id"],
            name=op.f("fk_disagreement_results_benchmark_id_benchmarks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_disagreement_results")),
        sa.UniqueConstraint(
            "benchmark_id",
            "params_key",
            "data_version",
            name=op.f("uq_disagreement_results_benchmark_id_params_key_data_version"),
        ),
    )


def downgrade() -> None:
    """Revert this revision: drop ``disagreement_results``."""
    op.drop_table("disagreement_results")
