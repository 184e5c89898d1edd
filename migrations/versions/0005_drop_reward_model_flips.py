"""Drop the ``flip:<reward model>`` label sets: reward models score each response alone.

A flip label says whether a judge changed its verdict when the two responses swapped places;
a reward model's two "orders" are one pair of rewards read twice, so its flip set meant
nothing (see ``app.services.evidence.flips``). Deleted with the set: its label events (imported,
derived, votes and adjudications) and the review queues voting on it, with their items,
assignments and skips. The touched benchmarks' ``data_version`` moves on, so no cached number
survives. SQLite runs migrations with foreign keys off (``app.migrate``), so child rows are
deleted explicitly, children first, the same statements on both dialects.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FLIP_PREFIX = "flip:"
_REWARD_MODEL = "reward_model"

_detectors = sa.table("detectors", sa.column("name"), sa.column("kind"))
_benchmarks = sa.table("benchmarks", sa.column("id"), sa.column("data_version"))
_instances = sa.table("instances", sa.column("id"), sa.column("benchmark_id"))
_events = sa.table("label_events", sa.column("instance_id"), sa.column("label_name"))
_queues = sa.table("review_queues", sa.column("id"), sa.column("label_name"))
_QUEUE_CHILDREN = [
    sa.table(name, sa.column("queue_id"))
    for name in ("queue_items", "queue_assignments", "queue_skips")
]


def upgrade() -> None:
    """Apply this revision."""
    conn = op.get_bind()
    rm_names = conn.execute(
        sa.select(_detectors.c.name).where(_detectors.c.kind == _REWARD_MODEL)
    ).scalars()
    labels = [_FLIP_PREFIX + name for name in rm_names]
    if not labels:
        return
    touched = list(
        conn.execute(
            sa.select(_instances.c.benchmark_id)
            .join(_events, _events.c.instance_id == _instances.c.id)
            .where(_events.c.label_name.in_(labels))
            .distinct()
        ).scalars()
    )
    queues = sa.select(_queues.c.id).where(_queues.c.label_name.in_(labels))
    for child in _QUEUE_CHILDREN:
        conn.execute(sa.delete(child).where(child.c.queue_id.in_(queues)))
    conn.execute(sa.delete(_queues).where(_queues.c.label_name.in_(labels)))
    conn.execute(sa.delete(_events).where(_events.c.label_name.in_(labels)))
    if touched:
        conn.execute(
            sa.update(_benchmarks)
            .where(_benchmarks.c.id.in_(touched))
            .values(data_version=_benchmarks.c.data_version + 1)
        )


def downgrade() -> None:
    """Nothing to restore: the deleted sets were derived, and are no longer derived."""
