"""Bulk inserts: constants written as SQLite literals store exactly what bound values would."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.ingest.table import import_table
from app.sql.bulk import sqlite_literal
from app.tables import LabelEvent, Prediction


@pytest.mark.parametrize(
    "value",
    [None, 0, -7, 2**62, 0.1, -1e-300, "", "it's", "'; DROP TABLE x; --", "a?b", '{"k": "v"}'],
)
def test_a_literal_reads_back_as_the_bound_value(value: object) -> None:
    conn = sqlite3.connect(":memory:")
    literal = sqlite_literal(value)
    assert literal is not None
    (read,) = conn.execute(f"SELECT {literal}").fetchone()
    (bound,) = conn.execute("SELECT ?", (value,)).fetchone()
    assert read == bound and type(read) is type(bound)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "nul\x00", b"bytes", True])
def test_values_without_an_exact_literal_stay_bound(value: object) -> None:
    assert sqlite_literal(value) is None


def test_a_quoted_file_name_is_stored_exactly(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """The import's constants (the reason names the file) survive quoting on both databases."""
    path = tmp_path / 'it\'s "odd"; --.csv'
    path.write_text("id,question,a,b,gold,m1\nq1,first?,yes,no,A,B\nq2,second,yes,no,B,?\n")
    with factory() as session, session.begin():
        import_table(
            session, path, benchmark="quoted", kind="choice", id_column="id",
            mapping={"question": "question"}, option_columns={"A": "a", "B": "b"},
            labels={"reference": "gold"}, answers={"m1": "m1"},
        )  # fmt: skip
    with factory() as session:
        reasons = set(session.scalars(select(LabelEvent.reason)))
        answers = sorted(session.scalars(select(Prediction.answer)))
        details = list(session.scalars(select(Prediction.details)))
    assert reasons == {f"imported from {path.name}"}
    assert answers == ["?", "B"]
    assert details == [{}, {}]
