"""Metric results: each computed metrics report, kept per request and data version.

Every server process and every restart reads the numbers a page, a job or the CLI computed
once (issue 14); a benchmark's deletion takes its results with it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 15:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    """Apply this revision: create ``metric_results``."""
    op.create_table(
        "metric_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("params_key", sa.String(length=64), nullable=False),
        sa.Column("data_version", sa.Integer(), nullable=False),
        sa.Column("params", _JSON, nullable=False),
        sa.Column("report", sa.Text(), nullable=False),
        sa.Column("plots", sa.Text(), nullable=True),
        sa.Column("figures", sa.Text(), nullable=True),
        sa.Column("compute_seconds", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["benchmark_id"],
            ["benchmarks.id"],
            name=op.f("fk_metric_results_benchmark_id_benchmarks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_results")),
        sa.UniqueConstraint(
            "benchmark_id",
            "params_key",
            "data_version",
            name=op.f("uq_metric_results_benchmark_id_params_key_data_version"),
        ),
    )


def downgrade() -> None:
    """Revert this revision: drop ``metric_results``."""
    op.drop_table("metric_results")
