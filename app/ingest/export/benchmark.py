"""Export a benchmark (or a filtered part) with resolved or original labels, plus a changelog.

Streams chunks of ids from one server-side cursor; writes temporary files renamed at the end.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import ColumnElement, Text, case, cast, func, literal_column, select, true
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.export import csv_safe
from app.ingest.readers import table_format
from app.services.evidence.answer_matrix import ANSWER_LABEL
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labels import label_names as benchmark_label_names
from app.services.evidence.outcomes import is_unanswerable
from app.services.evidence.payload_fields import SLICE_FIELDS, TEXT_FIELDS
from app.services.evidence.resolution import (
    CHANGE_COLUMNS,
    ChangeRow,
    Resolution,
    change_rows,
    check_k,
    fold,
    latest_events,
)
from app.services.table.facets import benchmark_facets
from app.services.table.instance_filter import InstanceFilter, filter_conditions, resolve_filter
from app.tables import Benchmark, Instance

ExportFormat = Literal["jsonl", "csv", "parquet"]
LabelChoice = Literal["resolved", "original"]

FORMATS: tuple[str, ...] = ("jsonl", "csv", "parquet")
LABEL_CHOICES: tuple[str, ...] = ("resolved", "original")
# Ids per chunk: bounds the rows held at once and the length of each IN list.
CHUNK_IDS = 5000
LABEL_PREFIX = "label:"
ORIGINAL_PREFIX = "original:"
# A payload field whose name would shadow an export column is written under this prefix.
PAYLOAD_PREFIX = "payload:"
_FIXED = ("external_id", "group_key")


@dataclass
class ExportSummary:
    """What one export wrote."""

    benchmark: str
    fmt: str
    labels: str
    rows: int = 0
    label_sets: list[str] = field(default_factory=list)
    # (instance, label set) pairs whose exported value differs from the original.
    changed: int = 0
    # Items resolved as unanswerable, left out of a resolved export (listed in the changelog).
    excluded: int = 0
    files: list[str] = field(default_factory=list)

    def line(self) -> str:
        """A one-line human summary for the CLI."""
        left_out = f", {self.excluded} unanswerable left out" if self.excluded else ""
        return (
            f"{self.benchmark}: {self.rows} rows, {len(self.label_sets)} label set(s) "
            f"({self.labels}), {self.changed} changed label(s){left_out}; "
            f"wrote {', '.join(self.files)}"
        )

    def __str__(self) -> str:
        return self.line()


@dataclass(frozen=True)
class _Column:
    """One payload column: the export name, the payload key and its value kind."""

    name: str
    key: str
    # text | integer | real | boolean | json (objects, arrays or mixed kinds)
    kind: str


def changelog_path(out_path: str | os.PathLike[str]) -> Path:
    """Where the changelog of an export to ``out_path`` goes: ``<stem>.changelog.csv`` beside it."""
    out = Path(out_path)
    return out.with_name(f"{out.stem}.changelog.csv")


def export_benchmark(
    session: Session,
    benchmark: Benchmark | str,
    out_path: str | os.PathLike[str],
    *,
    fmt: ExportFormat | None = None,
    labels: LabelChoice = "resolved",
    k: int = 2,
    flt: InstanceFilter | None = None,
    chunk_size: int = CHUNK_IDS,
) -> ExportSummary:
    """Write one row per instance with its payload and labels, and a changelog CSV beside it.

    Columns: ``external_id``, ``group_key``, every payload field (a field named like one of
    the other columns gets a ``payload:`` prefix), then per label set ``label:<name>`` (the
    resolved or original value, null when the instance has none) and, for resolved exports,
    ``original:<name>``. Rows come in external-id order. The changelog
    (:func:`changelog_path`) has the :class:`~app.services.evidence.resolution.ChangeRow` columns
    (list columns as JSON arrays, nulls as empty cells) and lists, in the export's row order,
    every exported label whose value differs from the original; it has only a header when
    ``labels="original"``.

    Payload values keep their JSON types in JSONL. In Parquet a field whose values are all
    strings, integers, numbers or booleans gets that type; any other field (objects, arrays,
    mixed kinds) is a string column holding JSON text, strings kept as they are. In CSV every
    non-string value is written as JSON text and null as an empty cell.

    Parameters
    ----------
    session : Session
        A session; nothing is written. On PostgreSQL a session that has not yet run a query
        is switched to a REPEATABLE READ snapshot, so the chunks see one state of the store
        (SQLite transactions already do).
    benchmark : Benchmark or str
        The benchmark, or its name.
    out_path : path
        The export file; its directory must exist. An existing file is replaced.
    fmt : {"jsonl", "csv", "parquet"}, optional
        The format (default: from the suffix of ``out_path``).
    labels : {"resolved", "original"}
        Which value each ``label:<name>`` column holds.
    k : int
        Agreeing voters needed for votes to override the original (at least 1).
    flt : InstanceFilter, optional
        Export only the instances the instance table shows for this filter.
    chunk_size : int
        Instance ids per chunk.

    Returns
    -------
    ExportSummary

    Raises
    ------
    NotFound
        No such benchmark.
    InvalidInput
        Unknown format or label choice, ``k`` below 1, a missing directory, or a filter that
        names something the benchmark does not have.

    """
    if labels not in LABEL_CHOICES:
        raise InvalidInput(f"labels must be one of {', '.join(LABEL_CHOICES)}", field="labels")
    check_k(k)
    out = Path(out_path)
    if fmt is None:
        fmt = table_format(out)
    elif fmt not in FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(FORMATS)}", field="fmt")
    if not out.parent.is_dir():
        raise InvalidInput("no such directory", file=str(out.parent))
    _pin_snapshot(session)
    bench = get_benchmark(session, benchmark) if isinstance(benchmark, str) else benchmark
    dialect = session.get_bind().dialect.name
    conds: list[ColumnElement[bool]] = [Instance.benchmark_id == bench.id]
    if flt is not None and not flt.is_empty:
        facets = benchmark_facets(session, bench)
        # Set-based shape: the whole match set is read once, not a page of it.
        conds = filter_conditions(facets, resolve_filter(facets, flt), dialect, counting=True)
    names = benchmark_label_names(session, bench.id)
    columns = _payload_columns(session, conds, dialect, bench.kind, names)
    header = [*_FIXED, *(c.name for c in columns), *_label_columns(names, labels)]
    summary = ExportSummary(benchmark=bench.name, fmt=fmt, labels=labels, label_sets=names)
    log_path = changelog_path(out)
    tmp_out = _temporary(out)
    tmp_log = _temporary(log_path)
    try:
        with _open_sink(fmt, tmp_out, header, columns) as sink, _changelog_sink(tmp_log) as log:
            for rows, changes, excluded in _chunks(
                session, conds, columns, names, labels, k, chunk_size
            ):
                sink.write(rows)
                log.write(changes)
                summary.rows += len(rows)
                summary.changed += len(changes)
                summary.excluded += excluded
        os.replace(tmp_log, log_path)
        os.replace(tmp_out, out)
    finally:
        for tmp in (tmp_out, tmp_log):
            tmp.unlink(missing_ok=True)
    summary.files = [str(out), str(log_path)]
    return summary


def _pin_snapshot(session: Session) -> None:
    # Only possible before the session's first statement; later callers keep their own level.
    if session.get_bind().dialect.name == "postgresql" and not session.in_transaction():
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def _temporary(path: Path) -> Path:
    # Same directory as the target, so the final rename is atomic.
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")


def _label_columns(names: Sequence[str], labels: str) -> list[str]:
    out = []
    for name in names:
        out.append(LABEL_PREFIX + name)
        if labels == "resolved":
            out.append(ORIGINAL_PREFIX + name)
    return out


def _payload_columns(
    session: Session,
    conds: Sequence[ColumnElement[bool]],
    dialect: str,
    kind: str,
    names: Sequence[str],
) -> list[_Column]:
    """Every top-level payload key of the exported instances with the kind of its values."""
    # The schema must be known before the first row is written, so the database lists the
    # distinct (key, JSON type) pairs instead of a first pass over every payload in Python.
    if dialect == "postgresql":
        each = func.jsonb_each(Instance.payload).table_valued("key", "value")
        json_type = func.jsonb_typeof(each.c.value)
        # jsonb has one number type; integers are told apart so they stay integers.
        integral = cast(each.c.value, Text).regexp_match("^-?[0-9]+$")
        value_type = case(
            ((json_type == "number") & integral, literal_column("'integer'")), else_=json_type
        )
    else:
        each = func.json_each(Instance.payload).table_valued("key", "type")
        value_type = each.c.type
    q = select(each.c.key, value_type).select_from(Instance).join(each, true()).where(*conds)
    kinds: dict[str, set[str]] = {}
    for key, json_type_name in session.execute(q.distinct()):
        kinds.setdefault(key, set()).add(_KINDS.get(json_type_name, "json"))
    reserved = {*_FIXED, *_label_columns(names, "resolved")}
    known = [*TEXT_FIELDS.get(kind, ()), *SLICE_FIELDS]
    order = [f for f in dict.fromkeys(known) if f in kinds] + sorted(set(kinds) - set(known))
    out = []
    for key in order:
        found = kinds[key] - {"null"}
        if not found:
            value_kind = "text"
        elif found <= {"integer", "real"}:
            value_kind = "integer" if found == {"integer"} else "real"
        elif len(found) == 1:
            value_kind = next(iter(found))
        else:
            value_kind = "json"
        clash = key in reserved or key.startswith((LABEL_PREFIX, ORIGINAL_PREFIX, PAYLOAD_PREFIX))
        out.append(_Column(PAYLOAD_PREFIX + key if clash else key, key, value_kind))
    return out


# JSON type names of SQLite's json_each and PostgreSQL's jsonb_typeof, as export kinds.
_KINDS = {
    "text": "text",
    "string": "text",
    "integer": "integer",
    "real": "real",
    "number": "real",
    "true": "boolean",
    "false": "boolean",
    "boolean": "boolean",
    "null": "null",
}


def _chunks(
    session: Session,
    conds: Sequence[ColumnElement[bool]],
    columns: Sequence[_Column],
    names: Sequence[str],
    labels: str,
    k: int,
    chunk_size: int,
) -> Iterator[tuple[list[dict[str, Any]], list[ChangeRow], int]]:
    """The export's rows, changelog rows and left-out count, one chunk of instances at a time.

    Rows come in external-id order; a chunk's changelog rows follow its rows, label sets in
    export column order. In a resolved export an item whose ``reference`` resolves to an
    unanswerable outcome (:data:`app.services.evidence.outcomes.UNANSWERABLE`) is left out; its
    changelog row names the outcome.
    """
    ids_q = (
        select(Instance.id)
        .where(*conds)
        .order_by(Instance.external_id)
        .execution_options(yield_per=max(1, chunk_size))
    )
    # A server-side cursor on PostgreSQL (a lazily stepped statement on SQLite): only one
    # chunk of ids is held at a time, however large the benchmark.
    for part in session.scalars(ids_q).partitions():
        ids = list(part)
        instances = {
            iid: (ext, group, payload)
            for iid, ext, group, payload in session.connection().execute(
                select(
                    Instance.id, Instance.external_id, Instance.group_key, Instance.payload
                ).where(Instance.id.in_(ids))
            )
        }
        resolutions = fold(latest_events(session, ids, names), k)
        rows = []
        excluded = 0
        position: dict[str, int] = {}
        for iid in ids:
            if iid not in instances:
                continue  # deleted since the ids were read (only without a pinned snapshot)
            ext, group, payload = instances[iid]
            position[ext] = len(rows) + excluded
            reference = resolutions.get((iid, ANSWER_LABEL))
            if labels == "resolved" and reference and is_unanswerable(reference[1].resolved):
                excluded += 1
                continue
            row: dict[str, Any] = {"external_id": ext, "group_key": group}
            for col in columns:
                row[col.name] = payload.get(col.key)
            for name in names:
                found = resolutions.get((iid, name))
                res: Resolution | None = found[1] if found is not None else None
                original = res.original if res is not None else None
                if labels == "resolved":
                    row[LABEL_PREFIX + name] = res.resolved if res is not None else None
                    row[ORIGINAL_PREFIX + name] = original
                else:
                    row[LABEL_PREFIX + name] = original
            rows.append(row)
        changes: list[ChangeRow] = []
        if labels == "resolved":
            label_order = {name: i for i, name in enumerate(names)}
            changes = sorted(
                change_rows(resolutions),
                key=lambda c: (position[c.external_id], label_order[c.label]),
            )
        yield rows, changes, excluded


class _Sink:
    """Where export rows go: one file in one format."""

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Append ``rows`` (dicts keyed by column name)."""
        raise NotImplementedError


class _JsonlSink(_Sink):
    def __init__(self, fh: IO[str], header: Sequence[str]) -> None:
        self.fh = fh
        self.header = list(header)

    def write(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            # Every row carries every column, so the three formats hold the same cells.
            record = {c: row[c] for c in self.header}
            self.fh.write(json.dumps(record, ensure_ascii=False) + "\n")


class _CsvSink(_Sink):
    def __init__(self, fh: IO[str], header: Sequence[str]) -> None:
        self.writer = csv_safe.writer(fh)
        self.header = list(header)
        self.writer.writerow(self.header)

    def write(self, rows: list[dict[str, Any]]) -> None:
        self.writer.writerows([[_csv_cell(row[c]) for c in self.header] for row in rows])


class _ParquetSink(_Sink):
    def __init__(self, path: Path, header: Sequence[str], columns: Sequence[_Column]) -> None:
        kinds = {c.name: c.kind for c in columns}
        self.kinds = [(name, kinds.get(name, "text")) for name in header]
        self.schema = pa.schema([(name, _ARROW[kind]) for name, kind in self.kinds])
        self.writer = pq.ParquetWriter(path, self.schema)

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        data = {name: [_arrow_cell(row[name], kind) for row in rows] for name, kind in self.kinds}
        # One row group per chunk: a reader can stream the file back the same way.
        self.writer.write_table(pa.Table.from_pydict(data, schema=self.schema))

    def close(self) -> None:
        self.writer.close()


_ARROW = {
    "text": pa.string(),
    "json": pa.string(),
    "integer": pa.int64(),
    "real": pa.float64(),
    "boolean": pa.bool_(),
}


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _arrow_cell(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "json":
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if kind == "real":
        return float(value)
    return value


@contextmanager
def _open_sink(
    fmt: str, path: Path, header: Sequence[str], columns: Sequence[_Column]
) -> Iterator[_Sink]:
    if fmt == "parquet":
        sink = _ParquetSink(path, header, columns)
        try:
            yield sink
        finally:
            sink.close()
        return
    # newline="" lets the csv module write its own line ends (and keeps JSONL's "\n").
    with open(path, "w", encoding="utf-8", newline="") as fh:
        yield _CsvSink(fh, header) if fmt == "csv" else _JsonlSink(fh, header)


class _ChangelogSink:
    def __init__(self, fh: IO[str]) -> None:
        self.writer = csv_safe.writer(fh)
        self.writer.writerow(CHANGE_COLUMNS)

    def write(self, changes: list[ChangeRow]) -> None:
        self.writer.writerows([changelog_cells(c) for c in changes])


def changelog_cells(change: ChangeRow) -> list[str]:
    """One changelog CSV line: nulls empty, list columns as JSON arrays, time in ISO 8601."""
    return [
        change.external_id,
        change.label,
        change.original or "",
        change.resolved or "",
        change.rule,
        json.dumps(list(change.authors), ensure_ascii=False),
        json.dumps(list(change.reasons), ensure_ascii=False),
        json.dumps(list(change.tags), ensure_ascii=False),
        change.decided_at.isoformat() if change.decided_at is not None else "",
    ]


@contextmanager
def _changelog_sink(path: Path) -> Iterator[_ChangelogSink]:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        yield _ChangelogSink(fh)
