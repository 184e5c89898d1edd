"""Every kind of bad input fails with ``file:line: field: reason`` and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.judgebench import import_judgebench
from app.ingest.mtbench import import_mtbench
from app.ingest.statements import import_statements
from app.ingest.table import import_table
from tests.conftest import DATA
from tests.ingest.test_helpers import O1_MINI, PAIRS_GPT4O, read_jsonl, table_counts

PAIR_ROWS = read_jsonl(PAIRS_GPT4O)[:6]
OUTPUT_ROWS = read_jsonl(O1_MINI)[:4]


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


@dataclass
class Case:
    """A bad file, the importer call that reads it, and the error it must raise."""

    name: str
    content: bytes | Callable[[Path], None]
    importer: Callable[[Session, Path], object]
    line: int | None
    field: str | None
    reason: str
    suffix: str = ".jsonl"


def _pairs(session: Session, path: Path) -> object:
    return import_judgebench(session, [path])


def _pairs_small_chunks(session: Session, path: Path) -> object:
    return import_judgebench(session, [path], chunk_size=2)


def _outputs(session: Session, path: Path) -> object:
    return import_judgebench(session, [], outputs=[path])


def _statements(session: Session, path: Path) -> object:
    return import_statements(session, path, benchmark="statements-under-test")


def _table(session: Session, path: Path) -> object:
    return import_table(
        session,
        path,
        "response",
        {"response": "text"},
        id_column="id",
        labels={"truth": "truth"},
        scores={"probe": "p"},
        chunk_size=2,
    )


def _edited(rows: list[dict], index: int, **changes: object) -> list[dict]:
    out = [dict(r) for r in rows]
    out[index].update(changes)
    return out


def _without(rows: list[dict], index: int, key: str) -> list[dict]:
    out = [dict(r) for r in rows]
    del out[index][key]
    return out


def _bad_decision(rows: list[dict]) -> list[dict]:
    out = json.loads(json.dumps(rows))
    out[1]["judgments"][1]["decision"] = "A>>B"
    return out


def _utf8_in_response(rows: list[dict]) -> bytes:
    lines = _jsonl(rows).split(b"\n")
    # Replace one character of response_B on line 2 by a byte that is never valid UTF-8.
    lines[1] = lines[1].replace(b'"response_B": "', b'"response_B": "\xff', 1)
    return b"\n".join(lines)


def _table_parquet_without_score(path: Path) -> None:
    pq.write_table(pa.table({"id": ["1", "2"], "text": ["a", "b"], "truth": ["1", "0"]}), path)


CSV_HEADER = b"id,text,truth,p\n"
CASES = [
    Case(
        "judgebench malformed JSON",
        _jsonl(PAIR_ROWS[:3]) + b'{"pair_id": "x", \n',
        _pairs,
        4,
        "record",
        "malformed JSON: Expecting property name enclosed in double quotes (column 18)",
    ),
    Case(
        "judgebench missing field",
        _jsonl(_without(PAIR_ROWS, 1, "question")),
        _pairs,
        2,
        "question",
        "missing field",
    ),
    Case(
        "judgebench wrong label",
        _jsonl(_edited(PAIR_ROWS, 2, label="A>>B")),
        _pairs,
        3,
        "label",
        "expected 'A>B' or 'B>A', got 'A>>B'",
    ),
    Case(
        "judgebench label not a string",
        _jsonl(_edited(PAIR_ROWS, 4, label=["A"])),
        _pairs,
        5,
        "label",
        "expected 'A>B' or 'B>A', got ['A']",
    ),
    Case(
        "judgebench duplicate id in one chunk",
        _jsonl([*PAIR_ROWS[:2], PAIR_ROWS[0]]),
        _pairs,
        3,
        "pair_id",
        f"duplicate id {PAIR_ROWS[0]['pair_id']!r} (also on line 1)",
    ),
    Case(
        "judgebench duplicate id across chunks",
        _jsonl([*PAIR_ROWS[:3], PAIR_ROWS[0]]),
        _pairs_small_chunks,
        4,
        "pair_id",
        f"duplicate id {PAIR_ROWS[0]['pair_id']!r} (also earlier in this file)",
    ),
    Case(
        "judgebench invalid UTF-8",
        _utf8_in_response(PAIR_ROWS),
        _pairs,
        2,
        "response_B",
        "invalid UTF-8 (byte 0xff at offset",
    ),
    Case("judgebench empty file", b"", _pairs, 1, "record", "empty file: no records"),
    Case("judgebench blank file", b"\n  \n", _pairs, 1, "record", "empty file: no records"),
    Case(
        "judgebench not an object",
        _jsonl(PAIR_ROWS[:1]) + b"[1, 2]\n",
        _pairs,
        2,
        "record",
        "expected a JSON object, got array",
    ),
    Case(
        "outputs unknown decision",
        _jsonl(_bad_decision(OUTPUT_ROWS)),
        _outputs,
        2,
        "judgments[1].decision",
        "expected 'A>B', 'B>A', 'A=B' or null, got 'A>>B'",
    ),
    Case(
        "outputs one judgment only",
        _jsonl(_edited(OUTPUT_ROWS, 2, judgments=OUTPUT_ROWS[2]["judgments"][:1])),
        _outputs,
        3,
        "judgments",
        "expected a list of two judgments (AB, then BA)",
    ),
    Case(
        "statements missing column",
        b"statement,truth\nThe sky is blue.,1\n",
        _statements,
        1,
        "label",
        "missing column",
        ".csv",
    ),
    Case(
        "statements wrong label",
        b"statement,label\nA.,1\nB.,0\nC.,2\n",
        _statements,
        4,
        "label",
        "expected one of 0, 1; got '2'",
        ".csv",
    ),
    Case(
        "statements invalid UTF-8",
        b'statement,label\nA.,1\n"Caf\xe9 au lait",0\n',
        _statements,
        3,
        "statement",
        "invalid UTF-8 (byte 0xe9 at offset 4 of the line)",
        ".csv",
    ),
    Case(
        "statements header only",
        b"statement,label\n",
        _statements,
        1,
        "record",
        "empty file: no records",
        ".csv",
    ),
    Case(
        "statements empty file",
        b"",
        _statements,
        1,
        "record",
        "empty file: no header and no records",
        ".csv",
    ),
    Case(
        "table duplicate id",
        CSV_HEADER + b"1,a,1,0.5\n2,b,0,0.25\n1,c,0,0.5\n",
        _table,
        4,
        "id",
        "duplicate id '1' (also earlier in this file)",
        ".csv",
    ),
    Case(
        "table ragged row",
        CSV_HEADER + b"1,a,1,0.5\n2,b,0\n",
        _table,
        3,
        "record",
        "expected 4 fields, got 3",
        ".csv",
    ),
    Case(
        "table bad score",
        CSV_HEADER + b"1,a,1,0.5\n2,b,0,0.7\n3,c,1,high\n",
        _table,
        4,
        "p",
        "expected a number, got 'high'",
        ".csv",
    ),
    Case(
        "table error after written chunks",
        CSV_HEADER + b"".join(f"{i},t{i},1,0.{i}\n".encode() for i in range(1, 8)) + b"8,x,7,0\n",
        _table,
        9,
        "truth",
        "expected one of 0, 1; got '7'",
        ".csv",
    ),
    Case(
        "table JSONL missing field",
        _jsonl([{"id": 1, "text": "ok", "truth": 1, "p": 0.1}, {"id": 2, "text": "ab"}]),
        _table,
        2,
        "truth",
        "missing field",
    ),
    Case(
        "table NUL character in text",
        _jsonl([{"id": 1, "text": "a\x00b", "truth": 1, "p": 0.1}]),
        _table,
        1,
        "text",
        "NUL character (cannot be stored)",
    ),
    Case(
        # Issue 21 item 19: imported and linked, but its page was a 404.
        "table id with a line break",
        CSV_HEADER + b'1,a,1,0.5\n"two\nlines",b,0,0.25\n',
        _table,
        3,  # the file line the record starts on (the header is line 1)
        "id",
        "an id holds no control characters (line breaks, tabs), got 'two\\nlines'",
        ".csv",
    ),
    Case(
        "table id with a tab",
        _jsonl(
            [
                {"id": "1", "text": "a", "truth": "1", "p": 0.5},
                {"id": "a\tb", "text": "b", "truth": "0", "p": 0.25},
            ]
        ),
        _table,
        2,
        "id",
        "an id holds no control characters",
    ),
    Case(
        "table parquet missing column",
        _table_parquet_without_score,
        _table,
        None,
        "p",
        "missing column",
        ".parquet",
    ),
]


@pytest.fixture
def seeded(factory: sessionmaker[Session], tmp_path: Path) -> dict[str, int]:
    """A store that already holds data, so "unchanged" means more than "still empty"."""
    seed = tmp_path / "seed.csv"
    seed.write_text("statement,label\nWater is wet.,1\nFire is cold.,0\n", encoding="utf-8")
    with transaction(factory) as session:
        import_statements(session, seed)
    counts = table_counts(factory)
    assert counts["instances"] == 2
    return counts


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_located_and_writes_nothing(
    case: Case, factory: sessionmaker[Session], tmp_path: Path, seeded: dict[str, int]
) -> None:
    path = tmp_path / f"bad{case.suffix}"
    if isinstance(case.content, bytes):
        path.write_bytes(case.content)
    else:
        case.content(path)
    with pytest.raises(InvalidInput) as err, transaction(factory) as session:
        case.importer(session, path)
    error = err.value
    assert (error.file, error.line, error.field) == (str(path), case.line, case.field)
    where = str(path) if case.line is None else f"{path}:{case.line}"
    assert error.message.startswith(f"{where}: {case.field}: {case.reason}"), error.message
    assert str(error) == error.message
    assert table_counts(factory) == seeded


def test_missing_file(
    factory: sessionmaker[Session], tmp_path: Path, seeded: dict[str, int]
) -> None:
    with pytest.raises(InvalidInput, match=r"nope\.jsonl: no such file"), transaction(factory) as s:
        import_judgebench(s, [tmp_path / "nope.jsonl"])
    assert table_counts(factory) == seeded


@pytest.mark.parametrize(
    ("models", "reason"),
    [
        (["gpt-4"], "need at least two models with answer files"),
        (["gpt-4", "gpt-4"], "a model is listed twice"),
        (["gpt-4", "gpt-5"], "no answer file gpt-5.jsonl"),
    ],
)
def test_mtbench_bad_models(
    factory: sessionmaker[Session], seeded: dict[str, int], models: list[str], reason: str
) -> None:
    answers = DATA / "mt-bench" / "model_answer"
    with pytest.raises(InvalidInput) as err, transaction(factory) as session:
        import_mtbench(session, DATA / "mt-bench" / "question.jsonl", answers, models=models)
    assert err.value.message == f"{answers}: models: {reason}"
    assert table_counts(factory) == seeded


def test_derived_label_sets_cannot_be_imported(
    factory: sessionmaker[Session], tmp_path: Path, seeded: dict[str, int]
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("statement,f\nA.,1\n", encoding="utf-8")
    with pytest.raises(InvalidInput) as err, transaction(factory) as session:
        import_table(session, path, "statement", labels={"flip:judge": "f"})
    assert err.value.field == "label flip:judge"
    assert "derived from judgments" in err.value.message
    assert table_counts(factory) == seeded
