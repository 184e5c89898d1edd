"""Instances: a stored natural sort key of the external id (``x:2`` before ``x:10``).

The key function is copied here as it was when this revision was written, not imported from
``app.natural_sort``: a later change to the application's key must not change what an old
migration writes (a change of the key is a new migration that recomputes the column).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 12:00:00
"""

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MAX_KEY_LENGTH = 1000
# Digit runs longer than this are split; each part is keyed as its own number.
_MAX_RUN = 99
_DIGITS = re.compile(r"[0-9]+")


def _number_key(run: str) -> str:
    # Leading zeros do not count; the two-digit length prefix sorts a longer number after a
    # shorter one whatever their first digits.
    digits = run.lstrip("0") or "0"
    return "".join(
        f"{len(part):02d}{part}"
        for part in (digits[i : i + _MAX_RUN] for i in range(0, len(digits), _MAX_RUN))
    )


def natural_key(external_id: str) -> str:
    """The natural sort key of ``external_id`` as of this revision (each digit run a number)."""
    return _DIGITS.sub(lambda m: _number_key(m.group()), external_id)[:MAX_KEY_LENGTH]


_KEY = sa.String(MAX_KEY_LENGTH).with_variant(
    sa.String(MAX_KEY_LENGTH, collation="C"), "postgresql"
)
_BATCH = 5000


def upgrade() -> None:
    """Apply this revision: add the column, fill it from the external ids, index it."""
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sort_key", _KEY, nullable=True))
    conn = op.get_bind()
    instances = sa.table(
        "instances", sa.column("id", sa.Integer), sa.column("external_id"), sa.column("sort_key")
    )
    update = (
        instances.update()
        .where(instances.c.id == sa.bindparam("row_id"))
        .values(sort_key=sa.bindparam("key"))
    )
    last = 0
    while True:
        rows = conn.execute(
            sa.select(instances.c.id, instances.c.external_id)
            .where(instances.c.id > last)
            .order_by(instances.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            break
        conn.execute(update, [{"row_id": i, "key": natural_key(ext)} for i, ext in rows])
        last = rows[-1][0]
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.alter_column("sort_key", existing_type=_KEY, nullable=False)
        batch_op.create_index(
            batch_op.f("ix_instances_benchmark_id_sort_key"), ["benchmark_id", "sort_key"]
        )


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_instances_benchmark_id_sort_key"))
        batch_op.drop_column("sort_key")
