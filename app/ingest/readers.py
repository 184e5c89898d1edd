"""Streaming readers for CSV, JSONL and Parquet that yield located rows and report bad input.

Every problem is an :class:`~app.errors.InvalidInput` saying ``file:line: field: reason``. Lines
are physical lines for CSV (the header is line 1) and JSONL; for Parquet the "line" is the
1-based row number.

Text is checked here, where it enters: no NUL characters or lone surrogates (which neither
database stores) in any value or key, and no JSON nested deeper than
:data:`~app.ingest.values.MAX_NESTING`.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.errors import InvalidInput
from app.ingest.progress import count_read, open_binary, open_text
from app.sql.json_paths import first_string_path, nesting_depth
from app.sql.storable import MAX_NESTING, find_unstorable, printable, unstorable

# Whole-record problems (malformed JSON, ragged CSV row, empty file) have no single field.
RECORD = "record"
PARQUET_BATCH_ROWS = 4096
# Model responses can be long; csv's default 128 KiB field limit would reject real data.
CSV_FIELD_LIMIT = 64 * 1024 * 1024

_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
_FORMATS[".pq"] = "parquet"
_MISSING = object()
T = TypeVar("T")
# In JSON, NUL and surrogates can only come from \u escapes (raw control characters are
# malformed JSON, raw surrogate bytes malformed UTF-8): lines without one skip the walk.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


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
        with open_text(path, encoding="utf-8-sig", newline="") as text:
            yield _open_csv(text, path, name, required)
        return
    with open_binary(path) as fh:
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
        if reason := unstorable(column):
            raise InvalidInput(reason, file=name, line=1, field=printable(column))
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
            # Strict UTF-8 decoding leaves no surrogates; a NUL byte is read as text.
            if "\x00" in "".join(values):
                field, reason = next(
                    (c, r) for c, v in zip(header, values, strict=True) if (r := unstorable(v))
                )
                raise InvalidInput(reason, file=name, line=line, field=field)
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
    found = first_string_path(value, _has_escaped_bytes, "", keys=True, root=RECORD)
    return None if found is None else printable(found)


def _json_record(text: str, name: str, number: int) -> Any:
    """One JSONL line parsed; malformed JSON and JSON nested too deeply are located errors."""
    try:
        data = json.loads(text)
    except RecursionError:
        data = None  # deeper than the parser goes: measured as too deep below
    else:
        # Depth is at most the number of brackets: most lines need no walk.
        if text.count("[") + text.count("{") <= MAX_NESTING:
            return data
        if nesting_depth(data, MAX_NESTING) <= MAX_NESTING:
            return data
    raise InvalidInput(
        f"nested deeper than {MAX_NESTING} levels", file=name, line=number, field=RECORD
    )


def _jsonl_rows(fh: IO[bytes], name: str, required: Sequence[str]) -> Iterator[Row]:
    bad: list[tuple[int, UnicodeDecodeError]] = []
    index = 0
    for number, text in _decoded_lines(fh, bad):
        if not text.strip():
            continue
        try:
            data = _json_record(text.rstrip("\r\n"), name, number)
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
        if _SUSPECT_ESCAPE.search(text) and (found := find_unstorable(data, root=RECORD)):
            raise InvalidInput(found[1], file=name, line=number, field=found[0])
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
    if problem := _schema_problem(parquet.schema_arrow):
        raise InvalidInput(problem[1], file=name, field=problem[0])
    for column in required:
        if column not in names:
            raise InvalidInput("missing column", file=name, field=column)
    if parquet.metadata.num_rows == 0:
        raise InvalidInput("empty file: no records", file=name, line=1, field=RECORD)
    # Progress counts a Parquet file's bytes by the share of its rows read (Arrow reads it).
    row_bytes = Path(path).stat().st_size / parquet.metadata.num_rows
    return Table(name, "parquet", names, lambda only: _parquet_rows(parquet, name, only, row_bytes))


def _schema_problem(schema: pa.Schema) -> tuple[str, str] | None:
    """(field, reason) of a name that cannot be stored or a type nested too deeply, or None.

    A column's values nest as deeply as its type (at most :data:`MAX_NESTING` levels).
    """
    for column in schema:
        stack = [(column, 0)]
        while stack:
            field, depth = stack.pop()
            if reason := unstorable(field.name):
                return printable(field.name), reason
            if depth > MAX_NESTING:
                return printable(column.name), f"nested deeper than {MAX_NESTING} levels"
            kind = field.type
            children = [kind.field(i) for i in range(kind.num_fields)]
            stack.extend((child, depth + 1) for child in children)
    return None


def _parquet_rows(
    parquet: pq.ParquetFile, name: str, columns: list[str] | None, row_bytes: float
) -> Iterator[Row]:
    index = 0
    # Row-group batches keep memory flat whatever the file size.
    batches = parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns)
    while True:
        try:
            batch = next(batches, None)
        except (pa.ArrowException, OSError) as exc:
            # A corrupt page behind an intact footer: found when its row group is read.
            raise _parquet_read_error(parquet, name, columns, exc) from None
        if batch is None:
            return
        try:
            rows = batch.to_pylist()
        except UnicodeDecodeError:
            raise _parquet_utf8_error(batch, name, index) from None
        if found := _parquet_unstorable(batch, rows):
            row, field, reason = found
            raise InvalidInput(reason, file=name, line=index + row + 1, field=field)
        count_read(round(row_bytes * (index + len(rows))) - round(row_bytes * index))
        for data in rows:
            index += 1
            yield Row(name, index, index, data)


def _parquet_unstorable(
    batch: pa.RecordBatch, rows: list[dict[str, Any]]
) -> tuple[int, str, str] | None:
    """(row in batch, field, reason) of the first unstorable string of a batch, or None.

    Valid UTF-8 holds no surrogates, so flat text columns are searched for NUL by Arrow; only
    nested columns are walked row by row.
    """
    for position, column in enumerate(batch.schema.names):
        array = batch.column(position)
        if pa.types.is_nested(array.type):
            for row, data in enumerate(rows):
                if found := find_unstorable(data[column], printable(column)):
                    return row, found[0], found[1]
            continue
        if pa.types.is_dictionary(array.type):
            array = array.dictionary
        if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
            continue
        if pc.any(pc.match_substring(array, "\x00")).as_py():
            for row, data in enumerate(rows):
                if isinstance(text := data[column], str) and (reason := unstorable(text)):
                    return row, column, reason
    return None


def _parquet_utf8_error(batch: pa.RecordBatch, name: str, before: int) -> InvalidInput:
    """Where the first string that is not UTF-8 is (a slow path, run on error)."""
    for row in range(batch.num_rows):
        for position, column in enumerate(batch.schema.names):
            try:
                batch.column(position)[row].as_py()
            except UnicodeDecodeError as exc:
                reason = f"invalid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
                return InvalidInput(reason, file=name, line=before + row + 1, field=column)
    return InvalidInput("invalid UTF-8", file=name, line=before + 1, field=RECORD)


def _parquet_read_error(
    parquet: pq.ParquetFile, name: str, columns: list[str] | None, exc: Exception
) -> InvalidInput:
    """The first row group that cannot be read, by its first row (a slow path, run on error)."""
    detail = " ".join(str(exc).split())
    first = 1
    for group in range(parquet.num_row_groups):
        try:
            parquet.read_row_group(group, columns=columns)
        except (pa.ArrowException, OSError) as error:
            detail = " ".join(str(error).split())
            return InvalidInput(
                f"unreadable Parquet data in row group {group + 1}: {detail}",
                file=name,
                line=first,
                field=RECORD,
            )
        first += parquet.metadata.row_group(group).num_rows
    return InvalidInput(f"unreadable Parquet data: {detail}", file=name, field=RECORD)
