"""Generic table import (CSV, JSONL or Parquet) driven by a column mapping; the statements core."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.finalize import finalize_import
from app.ingest.readers import Row, Table, open_table
from app.ingest.records import ImportSummary, Record, ScoreIn, SourceFields
from app.ingest.values import check_label_name, identifier, json_value, label_value, score_value
from app.ingest.writer import DEFAULT_CHUNK_ROWS, record_import, write_records
from app.services.benchmarks import ensure_benchmark
from app.services.detectors import ensure_detector
from app.tables import BenchmarkKind

# Payload fields every instance of a kind must have (what the pages and judges read).
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    BenchmarkKind.pairwise: ("prompt", "response_a", "response_b"),
    BenchmarkKind.response: ("response",),
    BenchmarkKind.statement: ("statement",),
}
# Without an id column, a row is named by its file and its position among the data rows.
ROW_ID_FIELD = "row number"


@dataclass(frozen=True)
class TableSpec:
    """How the columns of a table become instances, labels and scores.

    ``mapping`` maps payload fields to columns; a required payload field of the kind that is not
    mapped is taken from a column of the same name. ``group_candidates`` are tried in order when
    ``group`` is None; without any, each row is its own group. ``extra_columns`` copies every
    column not otherwise used into the payload; ``constants`` are added to every payload.
    """

    kind: str
    mapping: Mapping[str, str] = field(default_factory=dict)
    id_column: str | None = None
    group: str | None = None
    group_candidates: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    scores: Mapping[str, str] = field(default_factory=dict)
    extra_columns: bool = False
    constants: Mapping[str, Any] = field(default_factory=dict)

    def explicit_columns(self) -> list[str]:
        """Columns named outright; they must exist."""
        named = [*self.mapping.values(), *self.labels.values(), *self.scores.values()]
        named += [c for c in (self.id_column, self.group) if c]
        return list(dict.fromkeys(named))

    def resolve(self, table: Table) -> TableSpec:
        """Fill in implicit mappings and the group column from the table's columns."""
        mapping = dict(self.mapping)
        for name in REQUIRED_FIELDS[self.kind]:
            if name in mapping:
                continue
            if table.columns is not None and name not in table.columns:
                raise InvalidInput(
                    f"a {self.kind} instance needs payload field {name!r}: map a column to it",
                    file=table.name,
                    line=1 if table.format == "csv" else None,
                    field=name,
                )
            mapping[name] = name
        group = self.group
        if group is None and table.columns is not None:
            group = next((c for c in self.group_candidates if c in table.columns), None)
        return replace(self, mapping=mapping, group=group)

    def used_columns(self) -> set[str]:
        """Columns consumed by ids, labels and scores (never copied as extras)."""
        used = {*self.labels.values(), *self.scores.values(), *self.mapping.values()}
        if self.id_column:
            used.add(self.id_column)
        return used


def _check_spec(spec: TableSpec, file: str) -> None:
    if spec.kind not in REQUIRED_FIELDS:
        kinds = ", ".join(REQUIRED_FIELDS)
        raise InvalidInput(
            f"unknown kind {spec.kind!r} (expected {kinds})", file=file, field="kind"
        )
    for name in spec.labels:
        try:
            check_label_name(name)
        except ValueError as exc:
            raise InvalidInput(str(exc), file=file, field=f"label {name}") from None


class _RowMapper:
    """Turns rows into records for one resolved spec (lookups prepared once, not per row)."""

    def __init__(self, spec: TableSpec, stem: str, detectors: Mapping[str, int]) -> None:
        self.spec = spec
        self.stem = stem
        self.payload = list(spec.mapping.items())
        self.labels = list(spec.labels.items())
        self.scores = [(detectors[name], column) for name, column in spec.scores.items()]
        self.used = spec.used_columns()

    def __call__(self, row: Row) -> Record:
        spec, data = self.spec, row.data
        try:
            external_id = (
                identifier(data[spec.id_column]) if spec.id_column else f"{self.stem}:{row.index}"
            )
            group_key = identifier(data[spec.group]) if spec.group else external_id
            payload: dict[str, Any] = dict(spec.constants)
            for name, column in self.payload:
                payload[name] = json_value(data[column])
            labels: dict[str, str] = {}
            for name, column in self.labels:
                if (value := label_value(name, data[column])) is not None:
                    labels[name] = value
            scores: list[ScoreIn] = []
            for detector_id, column in self.scores:
                if (score := score_value(data[column])) is not None:
                    scores.append(ScoreIn(detector_id, score, {}, field=column))
        except (KeyError, ValueError):
            # Redo the row slowly to say which field failed and why.
            self._locate_error(row)
            raise
        if spec.extra_columns:
            for column, value in data.items():
                if column not in self.used and column not in payload:
                    payload[column] = json_value(value)
        return Record(row.line, external_id, group_key, payload, labels, scores)

    def _locate_error(self, row: Row) -> None:
        spec = self.spec
        for column in (spec.id_column, spec.group):
            if column:
                row.convert(column, identifier)
        for column in spec.mapping.values():
            row.require(column)
        for name, column in self.labels:
            row.convert(column, lambda raw, name=name: label_value(name, raw))
        for _, column in self.scores:
            row.convert(column, score_value)


def import_spec(
    session: Session,
    path: str | os.PathLike[str],
    spec: TableSpec,
    *,
    benchmark: str,
    importer: str,
    description: str = "",
    source: str = "",
    licence: str = "",
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportSummary:
    """Import one table file according to ``spec`` (the core of the table and statement importers).

    See :func:`import_table` for the behaviour; ``importer`` is recorded in the import record.
    """
    file = os.fspath(path)
    _check_spec(spec, file)
    target = ensure_benchmark(
        session, benchmark, spec.kind, description=description, source=source, licence=licence
    )
    detectors = {
        name: ensure_detector(
            session, name, "external", details={"imported_from": Path(path).name, "column": col}
        ).id
        for name, col in spec.scores.items()
    }
    summary = ImportSummary(files=[file])
    with open_table(path, required=spec.explicit_columns()) as table:
        resolved = spec.resolve(table)
        fields = SourceFields(
            external_id=resolved.id_column or ROW_ID_FIELD,
            group_key=resolved.group or resolved.id_column or ROW_ID_FIELD,
            payload=dict(resolved.mapping),
            labels=dict(resolved.labels),
        )
        only = None if resolved.extra_columns else resolved.explicit_columns()
        mapper = _RowMapper(resolved, Path(path).stem, detectors)
        records: Iterator[Record] = (mapper(row) for row in table.rows(only))
        counts = write_records(session, target, table.name, records, fields, chunk_size=chunk_size)
    record_import(session, target, importer, path, counts)
    summary.add(counts)
    return finalize_import(session, target, summary)


def import_table(
    session: Session,
    path: str | os.PathLike[str],
    kind: str,
    mapping: Mapping[str, str] | None = None,
    *,
    group: str | None = None,
    labels: Mapping[str, str] | None = None,
    scores: Mapping[str, str] | None = None,
    id_column: str | None = None,
    benchmark: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportSummary:
    """Import a CSV, JSONL or Parquet table (format by extension), streaming it in chunks.

    Parameters
    ----------
    session
        The caller's session; flushed, never committed (the caller owns the transaction).
    path
        The table file: ``.csv``, ``.jsonl``/``.ndjson`` or ``.parquet``/``.pq``.
    kind
        ``pairwise``, ``response`` or ``statement``. Required payload fields (pairwise: prompt,
        response_a, response_b; response: response; statement: statement) that ``mapping``
        leaves out are read from columns of the same name.
    mapping
        ``{payload field: column}``; only mapped columns enter the payload.
    group
        Column holding the group key (the question); without it each row is its own group.
    labels
        ``{label set: column}``; empty cells leave the item unlabelled. ``truth`` takes 0/1 and
        ``reference`` takes A/B; ``flip:*`` sets are derived and refused.
    scores
        ``{detector name: column}``; new detectors get kind ``external``. Empty cells are skipped.
    id_column
        Column holding the external id; without it an instance is named
        ``<file stem>:<data row number>`` (stable for the same file).
    benchmark
        Target benchmark (created if missing, with ``kind``); defaults to the file stem.
    chunk_size
        Rows per bulk write.

    Returns
    -------
    ImportSummary
        Counts of instances, labels and scores added and already present.

    Raises
    ------
    InvalidInput
        ``file:line: field: reason`` for malformed input; nothing is written if the caller rolls
        back, which :func:`app.db.transaction` does.
    Conflict
        When a row contradicts an instance, label or score already stored.

    """
    spec = TableSpec(
        kind=kind,
        mapping=dict(mapping or {}),
        id_column=id_column,
        group=group,
        labels=dict(labels or {}),
        scores=dict(scores or {}),
    )
    return import_spec(
        session,
        path,
        spec,
        benchmark=benchmark or Path(path).stem,
        importer="table",
        source=f"imported from {Path(path).name}",
        chunk_size=chunk_size,
    )
