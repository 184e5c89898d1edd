"""A big import refreshes PostgreSQL's planner statistics, so the next page reads use indexes.

On SQLite there are none to refresh (its planner reads no statistics unless ANALYZE ran, and
the queries here do not need them); the test runs where the dialect has them.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest import finalize
from app.ingest.table import import_table


def _write(path: Path, rows: int) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "group", "prompt", "response", "label", "score"])
        for i in range(rows):
            w.writerow([f"r{i}", f"g{i // 4}", f"p{i}", f"r{i}", i % 2, (i % 97) / 97])


def _analysed(session: Session) -> set[str]:
    return set(
        session.scalars(
            text(
                "SELECT DISTINCT tablename FROM pg_stats WHERE schemaname = current_schema() "
                "AND tablename IN ('instances', 'label_events', 'scores')"
            )
        )
    )


def test_an_import_of_many_rows_analyses_the_tables_it_wrote(
    engine: Engine,
    factory: sessionmaker[Session],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("planner statistics: PostgreSQL's")
    monkeypatch.setattr(finalize, "ANALYZE_FROM_ROWS", 300)
    small, big = tmp_path / "small.csv", tmp_path / "big.csv"
    _write(small, 50)  # 150 rows: below the threshold, nothing analysed
    with transaction(factory) as session:
        import_table(session, small, "response", {"prompt": "prompt", "response": "response"},
                     labels={"truth": "label"}, scores={"d": "score"}, id_column="id",
                     group="group", benchmark="small")  # fmt: skip
    with factory() as session:
        assert _analysed(session) == set()
    _write(big, 200)  # 600 rows
    with transaction(factory) as session:
        import_table(session, big, "response", {"prompt": "prompt", "response": "response"},
                     labels={"truth": "label"}, scores={"d": "score"}, id_column="id",
                     group="group", benchmark="big")  # fmt: skip
    with factory() as session:
        assert _analysed(session) == {"instances", "label_events", "scores"}
        distinct = session.scalar(
            text(
                "SELECT n_distinct FROM pg_stats WHERE schemaname = current_schema() "
                "AND tablename = 'label_events' AND attname = 'instance_id'"
            )
        )
    # One label per instance: every instance id is distinct (-1 means "all rows distinct").
    assert distinct == -1
