"""The hostile import corpus (tests/ingest/hostile/): each file is refused where it is read.

Every file must fail with ``file:line: field: reason`` (an :class:`InvalidInput`, never a
traceback) and leave the store as it was, on both databases. The corpus holds the classes an
outside attack found getting through (lone surrogates, NUL in keys, deep JSON, corrupt Parquet
pages) beside classes that were always refused, so none of them can regress.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.table import import_table
from app.main import create_app
from app.settings import Settings
from app.sql.storable import MAX_NESTING
from tests.ingest.hostile.generate import GENERATED, write_generated
from tests.ingest.test_helpers import table_counts
from tests.support.auth_support import bearer

CORPUS = Path(__file__).parent / "hostile"
NOT_FILES = {"__init__.py", "generate.py"}


def _table(session: Session, path: Path) -> object:
    return import_table(
        session,
        path,
        "response",
        {"response": "text", "meta": "meta"} if path.suffix == ".jsonl" else {"response": "text"},
        id_column="id",
        labels={"truth": "truth"},
        scores={"probe": "p"},
        benchmark="hostile",
    )


def _choices(session: Session, path: Path) -> object:
    return import_table(
        session,
        path,
        "choice",
        {"question": "question"},
        id_column="id",
        options="options",
        labels={"reference": "gold"},
        benchmark="hostile-choices",
    )


@dataclass(frozen=True)
class Expected:
    """How a corpus file must be refused: importer, line (row for Parquet), field, reason."""

    importer: Callable[[Session, Path], object]
    line: int | None
    field: str
    reason: str


DEEP = f"nested deeper than {MAX_NESTING} levels"
NUL = "NUL character (cannot be stored)"
EXPECTED: dict[str, Expected] = {
    # Got through before issue 14 (stored on SQLite, then every read failed; or a traceback).
    "lone_surrogate_value.jsonl": Expected(_table, 2, "text", "lone surrogate U+D800"),
    "lone_surrogate_key.jsonl": Expected(_table, 1, "meta.k\\udc00", "lone surrogate U+DC00"),
    "nul_key.jsonl": Expected(_table, 2, "meta.a\\u0000b", NUL),
    "nul_in_label.jsonl": Expected(_table, 3, "truth", NUL),
    "nul_in_id.csv": Expected(_table, 4, "id", NUL),
    "deep_950.jsonl": Expected(_table, 2, "record", DEEP),
    "deep_100k.jsonl": Expected(_table, 1, "record", DEEP),
    "corrupt_page.parquet": Expected(
        _table, 11, "record", "unreadable Parquet data in row group 2"
    ),
    "bad_utf8_string.parquet": Expected(_table, 12, "text", "invalid UTF-8 (byte 0xed"),
    "surrogate_in_choices.csv": Expected(_choices, 3, "options", "lone surrogate U+D800"),
    # Refused correctly before; kept so they stay refused.
    "nul_in_string.parquet": Expected(_table, 25, "text", NUL),
    "bad_utf8.jsonl": Expected(_table, 2, "text", "invalid UTF-8 (byte 0xe9"),
    "duplicate_ids.csv": Expected(_table, 4, "id", "duplicate id '1'"),
    "ragged_row.csv": Expected(_table, 3, "record", "expected 4 fields, got 3"),
    "malformed_choices.csv": Expected(_choices, 3, "options", "not a list literal"),
    "nan_score.jsonl": Expected(_table, 2, "p", "expected a finite number"),
    "not_an_object.jsonl": Expected(_table, 2, "record", "expected a JSON object, got array"),
    "not_parquet.parquet": Expected(_table, None, "record", "not a readable Parquet file"),
    # pyarrow refuses schemas nested past 100 levels; readers.py would too.
    "deep_type.parquet": Expected(
        _table, None, "record", "not a readable Parquet file: Parquet schema too deeply nested"
    ),
}


def test_the_corpus_and_its_expectations_agree() -> None:
    on_disk = {p.name for p in CORPUS.iterdir() if p.is_file() and p.name not in NOT_FILES}
    assert on_disk | set(GENERATED) == set(EXPECTED)
    assert not on_disk & set(GENERATED)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_generated(tmp_path_factory.mktemp("hostile"))


@pytest.fixture
def seeded(factory: sessionmaker[Session], tmp_path: Path) -> dict[str, int]:
    """A store holding a good import of both kinds, so "unchanged" is more than "empty"."""
    good = tmp_path / "good.jsonl"
    good.write_text(
        "".join(
            json.dumps({"id": str(i), "text": f"t{i}", "truth": i % 2, "p": i / 4, "meta": {}})
            + "\n"
            for i in range(4)
        ),
        encoding="utf-8",
    )
    choices = tmp_path / "good.csv"
    choices.write_text("id,question,options,gold\n9,Q?,\"['a', 'b']\",A\n", encoding="utf-8")
    with transaction(factory) as session:
        _table(session, good)
        _choices(session, choices)
    return table_counts(factory)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hostile_file_is_refused_and_writes_nothing(
    name: str,
    factory: sessionmaker[Session],
    seeded: dict[str, int],
    generated: dict[str, Path],
) -> None:
    expected = EXPECTED[name]
    path = generated.get(name, CORPUS / name)
    with pytest.raises(InvalidInput) as err, transaction(factory) as session:
        expected.importer(session, path)
    error = err.value
    assert (error.file, error.line, error.field) == (str(path), expected.line, expected.field)
    where = str(path) if expected.line is None else f"{path}:{expected.line}"
    assert error.message.startswith(f"{where}: {expected.field}: {expected.reason}"), error.message
    # The message itself can be printed and stored: no NUL or surrogate leaks into it.
    error.message.encode("utf-8")
    assert "\x00" not in error.message
    assert table_counts(factory) == seeded


def test_text_that_is_fine_still_imports(
    factory: sessionmaker[Session], settings: Settings, tmp_path: Path
) -> None:
    """Surrogate pairs (emoji), escaped backslashes and nesting up to the limit are data."""
    deepest = "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1)
    path = tmp_path / "fine.jsonl"
    path.write_text(
        '{"id": "1", "text": "smile \\ud83d\\ude00", "truth": 1, "p": 0.5, "meta": {"k": 1}}\n'
        '{"id": "2", "text": "not a NUL: \\\\u0000", "truth": 0, "p": 0.5, "meta": '
        + deepest
        + "}\n",
        encoding="ascii",
    )
    with transaction(factory) as session:
        _table(session, path)
    with TestClient(create_app(settings), headers=bearer(settings)) as client:
        got = client.get("/api/benchmarks/hostile/instances/1")
        assert got.status_code == 200, got.text
        assert got.json()["payload"]["response"] == "smile \U0001f600"
        second = client.get("/api/benchmarks/hostile/instances/2").json()["payload"]
        assert second["response"] == "not a NUL: \\u0000"
        depth, value = 0, second["meta"]
        while isinstance(value, list) and value:
            depth, value = depth + 1, value[0]
        assert depth + 1 == MAX_NESTING - 1
