"""Generic table import (CSV, JSONL, JSON array or Parquet) driven by a column mapping.

The core of the statement and MMLU-Redux importers too: a :class:`TableSpec` says which columns
become the payload, the group, labels, scores and (on choice and answer benchmarks) the options
and each model's answers. Each column may be a nested path into a column's value
(``doc.question``, ``doc.choices.0`` or ``doc.choices[0]``, see :mod:`app.ingest.paths`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from operator import itemgetter
from pathlib import Path
from typing import Any, Unpack

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.finalize import finalize_import
from app.ingest.json_array import open_json_array
from app.ingest.paths import FieldPath, PathMissing
from app.ingest.readers import Row, Table, open_table
from app.ingest.records import ImportSummary, PredictionIn, Record, ScoreIn, SourceFields
from app.ingest.values import (
    answer_text,
    check_label_name,
    identifier,
    json_value,
    label_value,
    score_value,
)
from app.ingest.writer import DEFAULT_CHUNK_ROWS, record_import, write_records
from app.services.evidence.benchmarks import BenchmarkNotes, ensure_benchmark
from app.services.evidence.choices import option_letter, option_letters, parse_options
from app.services.evidence.detectors import ensure_detectors
from app.services.evidence.graders import parse_grader, set_grader
from app.sql.storable import MAX_LABEL_LENGTH
from app.tables import BenchmarkKind

# Payload fields every instance of a kind must have (what the pages and judges read).
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    BenchmarkKind.pairwise: ("prompt", "response_a", "response_b"),
    BenchmarkKind.response: ("response",),
    BenchmarkKind.statement: ("statement",),
    BenchmarkKind.choice: ("question",),
    BenchmarkKind.answer: ("question",),
}
REFERENCE = "reference"
# Kinds whose items carry an option list; their references and answers are option letters.
CHOICE_KINDS = (BenchmarkKind.choice,)
# Kinds whose detectors give categorical answers (predictions) rather than scores.
ANSWER_KINDS = (BenchmarkKind.choice, BenchmarkKind.answer)
# Without an id column, a row is named by its file and its position among the data rows.
ROW_ID_FIELD = "row number"


@dataclass(frozen=True)
class TableSpec:
    """How the columns of a table become instances, labels and scores.

    ``mapping`` maps payload fields to columns; a required payload field of the kind that is not
    mapped is taken from a column of the same name. ``group_candidates`` are tried in order when
    ``group`` is None; without any, each row is its own group unless ``fixed_group`` names one
    group for every row. ``extra_columns`` copies every column not otherwise used into the
    payload; ``constants`` are added to every payload.

    Choice benchmarks read their options from one list column (``options``) or from one column
    per option (``option_columns``, letter -> column), into the payload field ``options``; their
    ``reference`` label is an option letter (a 0-based index is accepted); answers are kept as
    given (one naming no option is simply wrong).
    ``answers`` maps detector names to columns of categorical answers (predictions); ``grader``
    is the answer benchmark's grader spec (:mod:`app.services.evidence.graders`). ``derive`` may add
    labels computed from a record's other labels.
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
    fixed_group: str | None = None
    options: str | None = None
    option_columns: Mapping[str, str] = field(default_factory=dict)
    answers: Mapping[str, str] = field(default_factory=dict)
    grader: str | None = None
    derive: Callable[[dict[str, str]], dict[str, str]] | None = None

    def explicit_columns(self) -> list[str]:
        """Columns (or nested paths) named outright; they must exist."""
        named = [*self.mapping.values(), *self.labels.values(), *self.scores.values()]
        named += [*self.option_columns.values(), *self.answers.values()]
        named += [c for c in (self.id_column, self.group, self.options) if c]
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
        """Columns consumed by ids, labels, scores, options and answers (never extras).

        A nested path uses its whole first column: the rest of that column is not an extra.
        """
        used = {*self.labels.values(), *self.scores.values(), *self.mapping.values()}
        used |= {*self.option_columns.values(), *self.answers.values()}
        used |= {c for c in (self.id_column, self.options) if c}
        return used | {FieldPath.of(c).root for c in used}


def _check_columns(spec: TableSpec, table: Table) -> list[str] | None:
    """The columns to read (None: all), after checking that the named ones exist.

    Tables with a header (CSV, Parquet) are checked at once: each name is a column or a path
    whose first key is one. JSON rows have their own keys, checked row by row.
    """
    if table.columns is None:
        return None
    read: list[str] = []
    for name in spec.explicit_columns():
        column = FieldPath.of(name).column(table.columns)
        if column is None:
            raise InvalidInput(
                "missing column",
                file=table.name,
                line=1 if table.format == "csv" else None,
                field=name,
            )
        read.append(column)
    return read


def _getter(column: str) -> Callable[[Mapping[str, Any]], Any]:
    """Reads ``column`` from a row's data: a plain lookup, or a walk down a nested path.

    Both raise KeyError when the value is missing (the row is then redone slowly to say where).
    """
    path = FieldPath.of(column)
    return path.get if path.nested else itemgetter(column)


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
    choice = spec.kind in CHOICE_KINDS
    if choice and bool(spec.options) == bool(spec.option_columns):
        raise InvalidInput(
            "a choice table needs its options: one list column or one column per option",
            file=file,
            field="options",
        )
    if not choice and (spec.options or spec.option_columns):
        raise InvalidInput(f"{spec.kind} items have no options", file=file, field="options")
    letters = list(spec.option_columns)
    if letters and letters != list(option_letters(len(letters))):
        raise InvalidInput(
            f"option columns must be lettered A, B, C, ... in order, got {', '.join(letters)}",
            file=file,
            field="options",
        )
    if spec.answers and spec.kind not in ANSWER_KINDS:
        raise InvalidInput(
            "answers (predictions) belong to choice and answer benchmarks",
            file=file,
            field="answers",
        )
    if (spec.grader is not None) != (spec.kind == BenchmarkKind.answer):
        raise InvalidInput("a grader goes with answer benchmarks", file=file, field="grader")
    if spec.grader is not None:
        try:
            parse_grader(spec.grader)
        except ValueError as exc:
            raise InvalidInput(str(exc), file=file, field="grader") from None


class _RowMapper:
    """Turns rows into records for one resolved spec (lookups prepared once, not per row)."""

    def __init__(
        self,
        spec: TableSpec,
        stem: str,
        detectors: Mapping[str, int],
        answerers: Mapping[str, int],
    ) -> None:
        self.spec = spec
        self.stem = stem
        self.get = {column: _getter(column) for column in spec.explicit_columns()}
        self.payload = list(spec.mapping.items())
        self.labels = list(spec.labels.items())
        self.scores = [(detectors[name], column) for name, column in spec.scores.items()]
        self.answers = [(answerers[name], column) for name, column in spec.answers.items()]
        self.used = spec.used_columns()
        self.choice = spec.kind in CHOICE_KINDS

    def __call__(self, row: Row) -> Record:
        spec, data, get = self.spec, row.data, self.get
        try:
            external_id = (
                identifier(get[spec.id_column](data))
                if spec.id_column
                else f"{self.stem}:{row.index}"
            )
            group_key = (
                identifier(get[spec.group](data)) if spec.group else spec.fixed_group or external_id
            )
            payload: dict[str, Any] = dict(spec.constants)
            for name, column in self.payload:
                payload[name] = json_value(get[column](data))
            k = 0
            if self.choice:
                payload["options"] = options = self._options(data)
                k = len(options)
            labels: dict[str, str] = {}
            for name, column in self.labels:
                if (value := self._label(name, get[column](data), k)) is not None:
                    labels[name] = value
            if spec.derive is not None:
                labels.update(spec.derive(labels))
            scores: list[ScoreIn] = []
            for detector_id, column in self.scores:
                if (score := score_value(get[column](data))) is not None:
                    scores.append(ScoreIn(detector_id, score, {}, field=column))
            # Kept as given: an answer naming no option (a parse failure of the model's
            # output, "The", "E") is a real, wrong answer, not bad input.
            predictions = [
                PredictionIn(detector_id, answer, None, {}, column)
                for detector_id, column in self.answers
                if (answer := answer_text(get[column](data))) is not None
            ]
        except (KeyError, ValueError):
            # Redo the row slowly to say which field failed and why.
            self._locate_error(row)
            raise
        if spec.extra_columns:
            for column, value in data.items():
                if column not in self.used and column not in payload:
                    payload[column] = json_value(value)
        return Record(
            row.line, external_id, group_key, payload, labels, scores, [], predictions or ()
        )

    def _options(self, data: dict[str, Any]) -> list[str]:
        if self.spec.options:
            return parse_options(self.get[self.spec.options](data))
        columns = self.spec.option_columns.values()
        return parse_options([self.get[column](data) for column in columns])

    def _label(self, name: str, value: Any, k: int) -> str | None:
        if name == REFERENCE and self.choice:
            return option_letter(value, k)
        if name == REFERENCE and self.spec.kind == BenchmarkKind.answer:
            return answer_text(value, MAX_LABEL_LENGTH)
        return label_value(name, value)

    def _require(self, row: Row, column: str) -> Any:
        """The value of ``column`` (or path) in ``row``; a missing one names its line and path."""
        try:
            return self.get[column](row.data)
        except KeyError as exc:
            reason = exc.reason if isinstance(exc, PathMissing) else "missing field"
            raise row.error(column, reason) from None

    def _convert(self, row: Row, column: str, convert: Callable[[Any], Any]) -> Any:
        """``convert`` of ``column``'s value, a ValueError becoming an error at its line."""
        value = self._require(row, column)
        try:
            return convert(value)
        except ValueError as exc:
            raise row.error(column, str(exc)) from None

    def _locate_error(self, row: Row) -> None:
        spec = self.spec
        for column in (spec.id_column, spec.group):
            if column:
                self._convert(row, column, identifier)
        for column in spec.mapping.values():
            self._require(row, column)
        k = 0
        if self.choice:
            columns = [spec.options] if spec.options else list(spec.option_columns.values())
            for column in columns:
                self._require(row, column)
            k = len(self._convert(row, columns[0], lambda _: self._options(row.data)))
        for name, column in self.labels:
            self._convert(row, column, lambda raw, name=name: self._label(name, raw, k))
        for _, column in self.scores:
            self._convert(row, column, score_value)
        for _, column in self.answers:
            self._convert(row, column, answer_text)


TABLE_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".json", ".parquet", ".pq")
"""The files ``import table`` reads (``.json``: one array of objects)."""


def open_any_table(path: str | os.PathLike[str]) -> AbstractContextManager[Table]:
    """Open a table file of any of :data:`TABLE_SUFFIXES` for streaming, by extension."""
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        return open_json_array(path)
    if suffix not in TABLE_SUFFIXES:
        raise InvalidInput(
            f"unknown file type {suffix!r} (expected {', '.join(TABLE_SUFFIXES)})",
            file=os.fspath(path),
        )
    return open_table(path)


MAX_DETECTORS_PER_IMPORT = 1000
"""Detectors one file may create (a CSV with 100,000 stray columns made 100,000)."""


def import_spec(
    session: Session,
    path: str | os.PathLike[str],
    spec: TableSpec,
    *,
    benchmark: str,
    importer: str,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
    **notes: Unpack[BenchmarkNotes],
) -> ImportSummary:
    """Import one table file according to ``spec`` (the core of the table and statement importers).

    See :func:`import_table` for the behaviour; ``importer`` is recorded in the import record,
    ``notes`` go to a benchmark this creates.
    """
    file = os.fspath(path)
    _check_spec(spec, file)
    target = ensure_benchmark(session, benchmark, spec.kind, **notes)
    if spec.grader is not None:
        set_grader(session, target, spec.grader)

    many = len(spec.scores) + len(spec.answers)
    if many > MAX_DETECTORS_PER_IMPORT:
        raise InvalidInput(
            f"{many:,} score and answer columns make {many:,} detectors; one import makes at "
            f"most {MAX_DETECTORS_PER_IMPORT:,} (are the extra columns meant as data?)",
            file=file,
            line=1,
            field="columns",
        )

    def detector_ids(columns: Mapping[str, str], kind: str) -> dict[str, int]:
        source = Path(path).name
        wanted = {
            name: (kind, {"imported_from": source, "column": c}) for name, c in columns.items()
        }
        return ensure_detectors(session, wanted)

    detectors = detector_ids(spec.scores, "external")
    answerers = detector_ids(spec.answers, "model")
    summary = ImportSummary(files=[file])
    # Names may be nested paths: checked against the header here, not by the reader.
    with open_any_table(path) as table:
        read = _check_columns(spec, table)
        resolved = spec.resolve(table)
        fields = SourceFields(
            external_id=resolved.id_column or ROW_ID_FIELD,
            group_key=resolved.group or resolved.id_column or ROW_ID_FIELD,
            payload=dict(resolved.mapping),
            labels=dict(resolved.labels),
        )
        only = None
        if not resolved.extra_columns and read is not None:
            # Parquet reads only these columns: each path's first column, implicit ones added.
            implicit = [c for c in resolved.explicit_columns() if c in (table.columns or ())]
            only = [*read, *implicit]
        mapper = _RowMapper(resolved, Path(path).stem, detectors, answerers)
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
    options: str | None = None,
    option_columns: Mapping[str, str] | None = None,
    answers: Mapping[str, str] | None = None,
    grader: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportSummary:
    """Import a CSV, JSONL, JSON-array or Parquet table (format by extension), streamed in chunks.

    Parameters
    ----------
    session
        The caller's session; flushed, never committed (the caller owns the transaction).
    path
        The table file: ``.csv``, ``.jsonl``/``.ndjson``, ``.json`` (one array of objects,
        streamed element by element) or ``.parquet``/``.pq``.
    kind
        ``pairwise``, ``response``, ``statement``, ``choice`` or ``answer``. Required payload
        fields (pairwise: prompt, response_a, response_b; response: response; statement:
        statement; choice and answer: question) that ``mapping`` leaves out are read from
        columns of the same name.
    mapping
        ``{payload field: column}``; only mapped columns enter the payload. Here and in every
        other column argument a column may be a nested path into a column's value:
        ``doc.question``, ``doc.choices.0`` or ``doc.choices[0]`` (a name that is itself a
        column is read whole; see :mod:`app.ingest.paths`). A path that does not resolve on a
        row is refused as ``file:line: path: reason``.
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
    options, option_columns
        Choice tables: the column holding each item's option list (a list, or its Python or
        JSON literal), or ``{letter: column}`` with one column per option, A, B, ... in order.
        The ``reference`` label is then an option letter (or a 0-based index); answers are
        stored as given, so one that names no option counts as wrong.
    answers
        ``{detector name: column}`` of categorical answers (choice and answer tables); new
        detectors get kind ``model``. Empty cells are skipped.
    grader
        Answer tables: how answers are graded against ``reference`` (see
        :func:`app.services.evidence.graders.parse_grader`), kept with the benchmark.
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
        options=options,
        option_columns=dict(option_columns or {}),
        answers=dict(answers or {}),
        grader=grader,
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
