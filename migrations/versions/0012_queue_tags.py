"""Review queues' own defect tags.

A queue offers the defect tags chosen on its form (issue 21 item 3); a queue made before this
revision has none stored (NULL) and offers its benchmark kind's defaults.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 12:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision: add ``review_queues.tags``."""
    with op.batch_alter_table("review_queues") as batch:
        batch.add_column(
            sa.Column(
                "tags",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                nullable=True,
            )
        )


def downgrade() -> None:
    """Revert this revision: drop ``review_queues.tags``."""
    with op.batch_alter_table("review_queues") as batch:
        batch.drop_column("tags")
