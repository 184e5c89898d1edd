"""The importer's pause of the cyclic collector: restored, nested safely, cycles bounded."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.errors import InvalidInput
from app.ingest.gc_pause import paused_gc
from app.ingest.table import import_table


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_pauses_nest_and_restore(collector_on: None) -> None:
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled(collector_on: None) -> None:
    gc.disable()
    with paused_gc():
        pass
    assert not gc.isenabled()
    gc.enable()


def _choice_csv(path: Path, rows: int, bad_line: int | None = None) -> Path:
    lines = ["id,group,question,a,b,gold,m1"]
    for i in range(rows):
        gold = "Z" if i + 2 == bad_line else "A"
        lines.append(f"q{i},g{i // 4},question {i},yes,no,{gold},B")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _import(factory: sessionmaker[Session], path: Path) -> int:
    with factory() as session, session.begin():
        summary = import_table(
            session, path, benchmark="gc", kind="choice", id_column="id", group="group",
            mapping={"question": "question"}, option_columns={"A": "a", "B": "b"},
            labels={"reference": "gold"}, answers={"m1": "m1"}, chunk_size=50,
        )  # fmt: skip
        return summary.predictions_added


def test_import_restores_the_collector_after_success_and_failure(
    collector_on: None, factory: sessionmaker[Session], tmp_path: Path
) -> None:
    assert _import(factory, _choice_csv(tmp_path / "ok.csv", 120)) == 120
    assert gc.isenabled()
    with pytest.raises(InvalidInput, match=r"bad\.csv:90: gold"):
        _import(factory, _choice_csv(tmp_path / "bad.csv", 120, bad_line=90))
    assert gc.isenabled()


def test_cycles_made_during_an_import_are_collected_per_chunk(
    collector_on: None, factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """Cyclic garbage made while records stream does not pile up until the import ends."""
    import app.ingest.table as table_module

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    made = 0
    alive: list[int] = []
    mapper_call = table_module._RowMapper.__call__

    def leaky(self: object, row: object) -> object:
        nonlocal made
        Cycle()  # unreachable at once: only the cyclic collector can free it
        made += 1
        if made % 100 == 0:
            alive.append(sum(isinstance(o, Cycle) for o in gc.get_objects()))
        return mapper_call(self, row)  # type: ignore[arg-type]

    table_module._RowMapper.__call__ = leaky  # type: ignore[method-assign]
    try:
        _import(factory, _choice_csv(tmp_path / "cycles.csv", 600))
    finally:
        table_module._RowMapper.__call__ = mapper_call  # type: ignore[method-assign]
    # Chunks of 50 rows: at most about one chunk's cycles (plus the one being read) are alive.
    assert made == 600
    assert max(alive) <= 2 * 50, alive
