"""Streaming readers for CSV, JSONL and Parquet that yield located rows and report bad input.

Every problem is an :class:`~app.errors.InvalidInput` saying ``file:line: field: reason``. Lines
are physical lines for CSV (the header is line 1) and JSONL; for Parquet the "line" is the
1-based row number.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from app.errors import InvalidInput
from app.ingest.json_paths import first_string_path

# Whole-record problems (malformed JSON, ragged CSV row, empty file) have no single field.
RECORD = "record"
PARQUET_BATCH_ROWS = 4096
# Model responses can be long; csv's default 128 KiB field limit would reject real data.
CSV_FIELD_LIMIT = 64 * 1024 * 1024

_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
_FORMATS[".pq"] = "parquet"
_MISSING = object()
T = TypeVar("T")


@dataclass(slots=True)
class Row:
    """One input record: where it came from and its fields."""

    file: str
    line: int
    index: int
    data: dict[str, Any]

    def error(self, field: str | None, reason: str) -> InvalidInput:
        """An InvalidInput located at this row and ``field``."""
        return InvalidInput(reason, file=self.file, line=self.line, field=field)

    def require(self, field: str) -> Any:
        """The value of ``field``; a missing field is an error."""
        value = self.data.get(field, _MISSING)
        if value is _MISSING:
            raise self.error(field, "missing field")
        return value

    def convert(self, field: str, convert: Callable[[Any], T]) -> T:
        """``convert(value of field)``, a ValueError becoming an error located at this row."""
        try:
            return convert(self.require(field))
        except ValueError as exc:
            raise self.error(field, str(exc)) from None

    def text(self, field: str) -> str:
        """The value of ``field``, which must be a string."""
        value = self.require(field)
        if not isinstance(value, str):
            raise self.error(field, f"expected a string, got {type_name(value)}")
        return value


@dataclass
class Table:
    """An opened input file: its columns (None for JSONL, where each row has its own keys)."""

    name: str
    format: str
    columns: list[str] | None
    _rows: Callable[[list[str] | None], Iterator[Row]]

    def rows(self, only: Sequence[str] | None = None) -> Iterator[Row]:
        """Stream the rows; Parquet reads just the ``only`` columns when given."""
        return self._rows(list(dict.fromkeys(only)) if only is not None else None)

    def __iter__(self) -> Iterator[Row]:
        return self.rows()


def type_name(value: Any) -> str:
    """A JSON-ish name of ``value``'s type for messages."""
    if value is None:
        return "null"
    return {dict: "object", list: "array", bool: "boolean", str: "string"}.get(
        type(value), type(value).__name__
    )


def display_name(path: str | os.PathLike[str]) -> str:
    """How a file is named in messages: the path as the user gave it."""
    return os.fspath(path)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def table_format(path: str | os.PathLike[str]) -> str:
    """``csv``, ``jsonl`` or ``parquet`` from the file extension."""
    suffix = Path(path).suffix.lower()
    if suffix not in _FORMATS:
        known = ", ".join(sorted(_FORMATS))
        raise InvalidInput(f"unknown file type {suffix!r} (expected {known})", file=str(path))
    return _FORMATS[suffix]


@contextmanager
def open_table(
    path: str | os.PathLike[str],
    *,
    required: Sequence[str] = (),
    fmt: str | None = None,
) -> Iterator[Table]:
    """Open a CSV, JSONL or Parquet file for streaming, by extension unless ``fmt`` is given.

    Parameters
    ----------
    path
        The input file.
    required
        Columns (CSV, Parquet) or fields (JSONL, checked row by row) that must be present.
    fmt
        Force a format instead of guessing it from the extension.

    Raises
    ------
    InvalidInput
        On a missing file, a missing column, undecodable or malformed content, or no records.

    """
    name = display_name(path)
    fmt = fmt or table_format(path)
    if not Path(path).is_file():
        raise InvalidInput("no such file", file=name)
    if fmt == "parquet":
        yield _open_parquet(path, name, required)
        return
    if fmt == "csv":
        # Strict decoding at C speed; an undecodable byte is then located by a slow re-read.
        with open(path, encoding="utf-8-sig", newline="") as text:
            yield _open_csv(text, path, name, required)
        return
    with open(path, "rb") as fh:
        yield Table(name, "jsonl", None, lambda _only: _jsonl_rows(fh, name, required))


def _decoded_lines(
    fh: IO[bytes], bad: list[tuple[int, UnicodeDecodeError]]
) -> Iterator[tuple[int, str]]:
    """Physical lines decoded as UTF-8; undecodable ones are kept (surrogateescape) and noted."""
    for number, raw in enumerate(fh, 1):
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            # Decode anyway so the parser can say which field holds the bad bytes.
            bad.append((number, exc))
            yield number, raw.decode("utf-8", "surrogateescape")


def _utf8_error(file: str, line: int, field: str, exc: UnicodeDecodeError) -> InvalidInput:
    byte = exc.object[exc.start]
    return InvalidInput(
        f"invalid UTF-8 (byte 0x{byte:02x} at offset {exc.start} of the line)",
        file=file,
        line=line,
        field=field,
    )


def _has_escaped_bytes(text: str) -> bool:
    return any("\udc80" <= ch <= "\udcff" for ch in text)


def _open_csv(
    fh: IO[str], path: str | os.PathLike[str], name: str, required: Sequence[str]
) -> Table:
    csv.field_size_limit(CSV_FIELD_LIMIT)
    records = _csv_records(csv.reader(fh), name)
    try:
        first = next(records, None)
    except UnicodeDecodeError:
        raise _csv_utf8_error(path, name) from None
    if first is None:
        raise InvalidInput("empty file: no header and no records", file=name, line=1, field=RECORD)
    header = first[1]
    seen: set[str] = set()
    for column in header:
        if column in seen:
            raise InvalidInput("duplicate column", file=name, line=1, field=column)
        seen.add(column)
    for column in required:
        if column not in seen:
            raise InvalidInput("missing column", file=name, line=1, field=column)
    return Table(name, "csv", header, lambda _only: _csv_rows(records, path, name, header))


def _csv_records(reader: Any, name: str) -> Iterator[tuple[int, list[str]]]:
    """Non-blank records and the physical line each starts on."""
    start = 1
    while True:
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InvalidInput(
                f"malformed CSV: {exc}", file=name, line=start, field=RECORD
            ) from exc
        if values:
            yield start, values
        start = reader.line_num + 1


def _csv_rows(
    records: Iterator[tuple[int, list[str]]],
    path: str | os.PathLike[str],
    name: str,
    header: list[str],
) -> Iterator[Row]:
    index = 0
    width = len(header)
    try:
        for line, values in records:
            if len(values) != width:
                raise InvalidInput(
                    f"expected {width} fields, got {len(values)}",
                    file=name,
                    line=line,
                    field=RECORD,
                )
            index += 1
            yield Row(name, line, index, dict(zip(header, values, strict=True)))
    except UnicodeDecodeError:
        raise _csv_utf8_error(path, name) from None
    if index == 0:
        raise InvalidInput("empty file: no records", file=name, line=1, field=RECORD)


def _csv_utf8_error(path: str | os.PathLike[str], name: str) -> InvalidInput:
    """Where the first undecodable byte is: its line and column (a slow path, run on error)."""
    bad: list[tuple[int, UnicodeDecodeError]] = []
    with open(path, "rb") as fh:
        lines = (text for _, text in _decoded_lines(fh, bad))
        header: list[str] | None = None
        try:
            for values in csv.reader(lines):
                if bad:
                    line, exc = bad[0]
                    if header is None:
                        return _utf8_error(name, line, "header", exc)
                    columns = [
                        *header,
                        *(f"column {i + 1}" for i in range(len(header), len(values))),
                    ]
                    field = next(
                        (c for c, v in zip(columns, values, strict=False) if _has_escaped_bytes(v)),
                        RECORD,
                    )
                    return _utf8_error(name, line, field, exc)
                if header is None and values:
                    header = values
        except csv.Error:
            pass
    if bad:
        return _utf8_error(name, bad[0][0], RECORD, bad[0][1])
    return InvalidInput("invalid UTF-8", file=name, field=RECORD)


def _escaped_path(value: Any) -> str | None:
    """The JSON path of the first string (key or value) that holds undecodable bytes."""
    return first_string_path(value, _has_escaped_bytes, "", keys=True, root=RECORD)


def _jsonl_rows(fh: IO[bytes], name: str, required: Sequence[str]) -> Iterator[Row]:
    bad: list[tuple[int, UnicodeDecodeError]] = []
    index = 0
    for number, text in _decoded_lines(fh, bad):
        if not text.strip():
            continue
        try:
            data = json.loads(text.rstrip("\r\n"))
        except json.JSONDecodeError as exc:
            if bad:
                raise _utf8_error(name, number, RECORD, bad[0][1]) from exc
            raise InvalidInput(
                f"malformed JSON: {exc.msg} (column {exc.pos + 1})",
                file=name,
                line=number,
                field=RECORD,
            ) from exc
        if bad:
            raise _utf8_error(name, number, _escaped_path(data) or RECORD, bad[0][1])
        if not isinstance(data, dict):
            raise InvalidInput(
                f"expected a JSON object, got {type_name(data)}",
                file=name,
                line=number,
                field=RECORD,
            )
        index += 1
        row = Row(name, number, index, data)
        for field in required:
            row.require(field)
        yield row
    if index == 0:
        raise InvalidInput("empty file: no records", file=name, line=1, field=RECORD)


def _open_parquet(path: str | os.PathLike[str], name: str, required: Sequence[str]) -> Table:
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise InvalidInput(f"not a readable Parquet file: {exc}", file=name, field=RECORD) from exc
    names = list(parquet.schema_arrow.names)
    for column in required:
        if column not in names:
            raise InvalidInput("missing column", file=name, field=column)
    if parquet.metadata.num_rows == 0:
        raise InvalidInput("empty file: no records", file=name, line=1, field=RECORD)
    return Table(name, "parquet", names, lambda only: _parquet_rows(parquet, name, only))


def _parquet_rows(parquet: pq.ParquetFile, name: str, columns: list[str] | None) -> Iterator[Row]:
    index = 0
    # Row-group batches keep memory flat whatever the file size.
    for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns):
        for data in batch.to_pylist():
            index += 1
            yield Row(name, index, index, data)
