"""The streaming JSON-array reader: rows as json.load reads them, located at their first line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.errors import InvalidInput
from app.ingest import json_array
from app.ingest.json_array import open_json_array
from app.sql.storable import MAX_NESTING
from tests.ingest.test_helpers import FORMATS

HAND_WRITTEN = FORMATS / "alpaca_eval" / "annotations.json"


def _rows(path: Path) -> list[tuple[int, dict[str, object]]]:
    with open_json_array(path) as table:
        return [(row.line, row.data) for row in table]


@pytest.mark.parametrize("read_bytes", [1 << 20, 7, 1])
def test_rows_equal_json_load_whatever_the_block_size(
    monkeypatch: pytest.MonkeyPatch, read_bytes: int
) -> None:
    # Blocks of 1 and 7 bytes cut every element, string, number and UTF-8 sequence somewhere.
    monkeypatch.setattr(json_array, "READ_BYTES", read_bytes)
    text = HAND_WRITTEN.read_text(encoding="utf-8")
    starts = [n for n, line in enumerate(text.splitlines(), 1) if line == "  {"]
    rows = _rows(HAND_WRITTEN)
    assert [data for _, data in rows] == json.loads(text)
    assert [line for line, _ in rows] == starts


def test_numbers_cut_at_a_block_end_are_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(json_array, "READ_BYTES", 3)
    path = tmp_path / "a.json"
    path.write_text('\ufeff[{"p": 1.0000000918, "q": "é€"},\n{"p": 12345}]', encoding="utf-8")
    assert _rows(path) == [(1, {"p": 1.0000000918, "q": "é€"}), (2, {"p": 12345})]


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ('{"instruction": "x"}\n', 1, "record: expected a JSON array (this looks like JSON Lines: one object per line)"),  # noqa: E501
        ("[\n]\n", 2, "record: empty file: no records"),
        ('[\n  {"a": 1},\n  {"b": 2\n', 4, "record: malformed JSON: Expecting ',' delimiter (column 1)"),  # noqa: E501
        ('[\n  {"a": 1}\n  {"b": 2}\n]', 3, "record: malformed JSON: expected ',' or ']' after an array element"),  # noqa: E501
        ('[\n  {"a": 1},\n  [1]\n]', 3, "record: expected a JSON object, got array"),
        ('[{"a": 1}] [', 1, "record: unexpected content after the JSON array"),
        ('[\n  {"a": 1},\n', 3, "record: malformed JSON: the array is not closed"),
        ('[\n{"a": "\\u0000"}]', 2, "a: NUL character (cannot be stored)"),
        ("[\n" + "[" * 110 + "]" * 110 + "]", 2, f"record: nested deeper than {MAX_NESTING} levels"),  # noqa: E501
    ],
)  # fmt: skip
def test_malformed_arrays_are_refused_with_their_line(
    tmp_path: Path, text: str, line: int, reason: str
) -> None:
    path = tmp_path / "annotations.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInput) as info:
        _rows(path)
    assert str(info.value) == f"{path}:{line}: {reason}"


def test_invalid_utf8_is_located(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b'[\n{"a": "ok"},\n{"a": "\xff"}]')
    with pytest.raises(InvalidInput) as info:
        _rows(path)
    assert str(info.value) == f"{path}:3: record: invalid UTF-8 (byte 0xff)"
