"""Language models and activation sets.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 16:01:33.561273
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "language_models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("path", sa.String(length=1000), nullable=False),
        sa.Column("fingerprint", sa.String(length=128), nullable=False),
        sa.Column("dtype", sa.String(length=20), nullable=False),
        sa.Column("chat_template", sa.Text(), nullable=True),
        sa.Column("n_layers", sa.Integer(), nullable=True),
        sa.Column("d_model", sa.Integer(), nullable=True),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_language_models")),
        sa.UniqueConstraint("name", name=op.f("uq_language_models_name")),
    )
    op.create_table(
        "activation_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=True),
        sa.Column("model_fingerprint", sa.String(length=128), nullable=False),
        sa.Column("path", sa.String(length=1000), nullable=False),
        sa.Column(
            "layers",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("position_rule", sa.String(length=200), nullable=False),
        sa.Column("dtype", sa.String(length=20), nullable=False),
        sa.Column("d_model", sa.Integer(), nullable=False),
        sa.Column(
            "instance_ids",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["benchmark_id"],
            ["benchmarks.id"],
            name=op.f("fk_activation_sets_benchmark_id_benchmarks"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["language_models.id"],
            name=op.f("fk_activation_sets_model_id_language_models"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_activation_sets")),
        sa.UniqueConstraint("name", name=op.f("uq_activation_sets_name")),
    )
    with op.batch_alter_table("activation_sets", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_activation_sets_benchmark_id"), ["benchmark_id"], unique=False
        )


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("activation_sets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_activation_sets_benchmark_id"))

    op.drop_table("activation_sets")
    op.drop_table("language_models")
