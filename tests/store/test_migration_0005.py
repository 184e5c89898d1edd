"""Migration 0005 deletes the ``flip:<reward model>`` label sets, nothing else (both dialects)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from app import migrate
from app.db import make_engine
from app.settings import Settings
from tests.conftest import _drop_pg_database, empty_database_url

RM = "reward_model/rm-a"
RM_UNUSED = "reward_model/rm-b"
JUDGE = "arena_hard/judge"
NOW = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture
def engine_0004(dialect: str, tmp_path: Path) -> Iterator[Engine]:
    url = empty_database_url(dialect, tmp_path)
    engine = make_engine(Settings(data_dir=tmp_path, database_url=url))
    migrate.upgrade(engine, "0004")
    yield engine
    engine.dispose()
    if dialect == "postgresql":
        _drop_pg_database(url)


def _seed(conn: sa.Connection, t: dict[str, sa.Table]) -> None:
    def add(table: str, *rows: dict[str, Any]) -> None:
        conn.execute(sa.insert(t[table]), [{"created_at": NOW, **r} for r in rows])

    def plain(table: str, *rows: dict[str, Any]) -> None:
        conn.execute(sa.insert(t[table]), list(rows))

    notes = {"description": "", "source": "", "licence": "", "details": {}}
    add(
        "benchmarks",
        {"id": 1, "name": "jb", "kind": "pairwise", "data_version": 3, **notes},
        {"id": 2, "name": "other", "kind": "pairwise", "data_version": 7, **notes},
    )
    add(
        "instances",
        *(
            {"id": i, "benchmark_id": 1 if i < 4 else 2, "external_id": f"p{i}"}
            | {"group_key": "g", "payload": {}}
            for i in range(1, 6)
        ),
    )
    add(
        "detectors",
        *(
            {"id": i, "name": name, "kind": kind, "description": "", "details": {}}
            for i, (name, kind) in enumerate(
                [(JUDGE, "judge"), (RM, "reward_model"), (RM_UNUSED, "reward_model")], start=1
            )
        ),
    )
    event = {"author": "", "reason": "", "tags": []}
    rows = []
    for inst in range(1, 6):
        rows.append({"instance_id": inst, "label_name": "reference", "value": "A"})
        rows.append({"instance_id": inst, "label_name": f"flip:{JUDGE}", "value": "0"})
        rows.append({"instance_id": inst, "label_name": f"flip:{RM}", "value": "1"})
    rows.append({"instance_id": 1, "label_name": f"flip:{RM}", "value": None})  # a retraction
    add(
        "label_events",
        *({"source": "derived", **event, **r} for r in rows),
        {"instance_id": 2, "label_name": f"flip:{RM}", "value": "0", "source": "vote", **event},
        # A label set merely named like one of them stays.
        {"instance_id": 2, "label_name": "flip:reward_model", "value": "1", "source": "x", **event},
    )
    add("users", {"id": 1, "name": "ann", "role": "annotator", "active": True})
    queue = {"source": "filter", "query": "", "overlap_k": 1, "blind": True, "choices": ["0", "1"]}
    add(
        "review_queues",
        {"id": 1, "benchmark_id": 1, "name": "rm flips", "label_name": f"flip:{RM}", **queue}
        | {"instructions": "", "created_by": "ann"},
        {"id": 2, "benchmark_id": 1, "name": "refs", "label_name": "reference", **queue}
        | {"instructions": "", "created_by": "ann"},
    )
    plain(
        "queue_items",
        *({"queue_id": q, "instance_id": i, "position": i} for q in (1, 2) for i in (1, 2)),
    )
    plain("queue_assignments", {"queue_id": 1, "user_id": 1}, {"queue_id": 2, "user_id": 1})
    add(
        "queue_skips",
        {"queue_id": 1, "instance_id": 1, "user_id": 1},
        {"queue_id": 2, "instance_id": 2, "user_id": 1},
    )
    add(
        "scores",
        {"detector_id": 2, "instance_id": 1, "score": 0.25, "details": {}},
        {"detector_id": 3, "instance_id": 4, "score": 0.75, "details": {}},
    )
    add(
        "judgments",
        *(
            {"instance_id": 1, "detector_id": d, "order": o, "raw_output": "", "choice": "A"}
            | {"mode": "imported", "details": {}}
            for d in (1, 2)
            for o in ("AB", "BA")
        ),
    )
    add("comments", {"instance_id": 1, "author": "ann", "body": "flip:"})


def _snapshot(engine: Engine) -> dict[str, set[tuple[Any, ...]]]:
    meta = sa.MetaData()
    meta.reflect(engine)
    out = {}
    with engine.connect() as conn:
        for name, table in meta.tables.items():
            if name != "alembic_version":
                out[name] = {tuple(map(repr, row)) for row in conn.execute(sa.select(table))}
    return out


def test_0005_drops_reward_model_flip_sets_only(engine_0004: Engine) -> None:
    meta = sa.MetaData()
    meta.reflect(engine_0004)
    with engine_0004.begin() as conn:
        _seed(conn, dict(meta.tables))
    before = _snapshot(engine_0004)
    migrate.upgrade(engine_0004, "0005")
    after = _snapshot(engine_0004)

    with engine_0004.connect() as conn:
        names = set(conn.execute(sa.text("SELECT DISTINCT label_name FROM label_events")).scalars())
        versions = dict(conn.execute(sa.text("SELECT id, data_version FROM benchmarks")).all())
        queues = set(conn.execute(sa.text("SELECT name FROM review_queues")).scalars())
    assert names == {"reference", f"flip:{JUDGE}", "flip:reward_model"}
    assert queues == {"refs"}
    # Both benchmarks had flip:RM labels: their cached numbers must not survive.
    assert versions == {1: 4, 2: 8}

    removed = {t: before[t] - after[t] for t in before}
    added = {t: after[t] - before[t] for t in before}
    # Every flip:RM event (6 derived incl. the retraction, 1 vote), queue 1 and its children.
    assert {t: len(rows) for t, rows in removed.items() if rows} == {
        "label_events": 7,
        "review_queues": 1,
        "queue_items": 2,
        "queue_assignments": 1,
        "queue_skips": 1,
        "benchmarks": 2,
    }
    assert all(repr(f"flip:{RM}") in row for row in removed["label_events"])
    # Nothing else changed: the only rows that differ are the two bumped benchmark rows.
    assert {t: len(rows) for t, rows in added.items() if rows} == {"benchmarks": 2}

    # The store still goes down and up again.
    migrate.downgrade(engine_0004, "0004")
    migrate.upgrade(engine_0004, "0005")
    assert _snapshot(engine_0004) == after


def test_0005_on_a_store_without_reward_models(engine_0004: Engine) -> None:
    with engine_0004.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO benchmarks (id, name, kind, description, source, licence, "
                "data_version, details, created_at) VALUES (1, 'b', 'pairwise', '', '', '', 1, "
                "'{}', CURRENT_TIMESTAMP)"
            )
        )
    before = _snapshot(engine_0004)
    migrate.upgrade(engine_0004, "0005")
    assert _snapshot(engine_0004) == before
