"""Active review queues: ordered by a label-error ranker and re-ranked as verdicts arrive.

``ranker`` names the ranker a queue is ordered by (NULL: the source's order), ``rerank_every``
how many newly reviewed items trigger a re-ranking job (0: only on demand) and ``ranking`` the
state of the last re-ranking (when, on how many verdicts, the estimated defects left).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 16:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision: add ``review_queues.ranker``, ``rerank_every`` and ``ranking``."""
    with op.batch_alter_table("review_queues") as batch:
        batch.add_column(sa.Column("ranker", sa.String(100), nullable=True))
        batch.add_column(
            sa.Column("rerank_every", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column(
                "ranking",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                nullable=True,
            )
        )


def downgrade() -> None:
    """Revert this revision: drop the three columns."""
    with op.batch_alter_table("review_queues") as batch:
        batch.drop_column("ranking")
        batch.drop_column("rerank_every")
        batch.drop_column("ranker")
