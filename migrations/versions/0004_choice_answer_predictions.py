"""Choice and answer benchmarks: benchmark details (the grader) and detector predictions.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 00:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_OLD_KINDS = "kind IN ('pairwise', 'response', 'statement')"
_NEW_KINDS = "kind IN ('pairwise', 'response', 'statement', 'choice', 'answer')"


def _kinds(check: str) -> None:
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_benchmarks_kind"), type_="check")
        batch_op.create_check_constraint(batch_op.f("ck_benchmarks_kind"), check)


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("details", _JSON, nullable=False, server_default="{}"))
    _kinds(_NEW_KINDS)
    op.create_table(
        "predictions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("detector_id", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.Integer(), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("probabilities", _JSON, nullable=True),
        sa.Column("details", _JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["detector_id"],
            ["detectors.id"],
            name=op.f("fk_predictions_detector_id_detectors"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["instance_id"],
            ["instances.id"],
            name=op.f("fk_predictions_instance_id_instances"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_predictions")),
        sa.UniqueConstraint(
            "detector_id", "instance_id", name=op.f("uq_predictions_detector_id_instance_id")
        ),
    )
    with op.batch_alter_table("predictions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_predictions_instance_id"), ["instance_id"])


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("predictions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_predictions_instance_id"))
    op.drop_table("predictions")
    op.execute("DELETE FROM benchmarks WHERE kind IN ('choice', 'answer')")
    _kinds(_OLD_KINDS)
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.drop_column("details")
