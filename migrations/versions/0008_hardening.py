"""Hardening: the sign-in throttle's table, and jobs' lost leases counted apart from attempts.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "login_failures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name_sha256", sa.String(length=64), nullable=False),
        sa.Column("client", sa.String(length=64), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_login_failures")),
        sa.UniqueConstraint(
            "name_sha256", "client", name=op.f("uq_login_failures_name_sha256_client")
        ),
    )
    with op.batch_alter_table("login_failures", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_login_failures_window_start"), ["window_start"])
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("lease_losses", sa.Integer(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("lease_losses")
    with op.batch_alter_table("login_failures", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_login_failures_window_start"))
    op.drop_table("login_failures")
