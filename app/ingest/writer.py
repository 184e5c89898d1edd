"""The one write path of every importer: chunked bulk inserts with idempotence and conflict checks.

Records are buffered and written a chunk at a time in bulk (:mod:`app.sql.bulk`; no ORM object
per row). Each chunk first looks up what the store already holds: identical rows are skipped
(idempotent re-import), differing ones raise :class:`~app.errors.Conflict`, and an id met twice in
one file raises :class:`~app.errors.InvalidInput`. Nothing is committed here.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable
from itertools import repeat
from operator import eq, itemgetter
from pathlib import Path
from typing import Any

from sqlalchemy import Table, func, select
from sqlalchemy.orm import Session

from app.errors import Conflict, InvalidInput
from app.ingest.gc_pause import collect_young, paused_gc
from app.ingest.readers import file_sha256
from app.ingest.records import ImportCounts, Record, SourceFields
from app.ingest.values import MAX_ID_LENGTH
from app.natural_sort import natural_key
from app.sql.bulk import bulk_insert, one_of
from app.sql.storable import find_unstorable, unstorable
from app.tables import (
    Benchmark,
    ImportRecord,
    Instance,
    Judgment,
    LabelEvent,
    Prediction,
    Score,
    utcnow,
)

DEFAULT_CHUNK_ROWS = 4000
IMPORT_SOURCE = "import"
_MISSING = object()

_instances = Instance.__table__
_labels = LabelEvent.__table__
_judgments = Judgment.__table__
_scores = Score.__table__
_predictions = Prediction.__table__


def conflict(file: str, line: int, field: str, reason: str) -> Conflict:
    """A Conflict located like InvalidInput: ``file:line: field: reason``."""
    return Conflict(reason, file=file, line=line, field=field)


def _show(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _differs(stored: Any, new: Any) -> bool:
    if stored == new:
        return False
    # JSON storage turns tuples into lists and so on; compare in the stored form.
    return bool(stored != json.loads(json.dumps(new)))


def _first_difference(stored: dict[str, Any], new: dict[str, Any]) -> str | None:
    for key in sorted(set(stored) | set(new)):
        if _differs(stored.get(key, _MISSING), new.get(key, _MISSING)):
            return key
    return None


# C0 and C1 control characters, DEL included.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class RecordWriter:
    """Writes the records of one input file into one benchmark, a chunk at a time.

    Parameters
    ----------
    session
        The caller's session (its transaction is the import's transaction).
    benchmark
        The target benchmark (already flushed).
    file
        The input file's name as shown in messages.
    fields
        Input field names for messages.
    chunk_size
        Records per chunk: bounds memory and the size of each ``IN`` list.

    """

    def __init__(
        self,
        session: Session,
        benchmark: Benchmark,
        file: str,
        fields: SourceFields,
        chunk_size: int = DEFAULT_CHUNK_ROWS,
    ) -> None:
        self.session = session
        self.benchmark_id = benchmark.id
        self.file = file
        self.fields = fields
        self.chunk_size = max(1, chunk_size)
        self.counts = ImportCounts()
        self._buffer: list[Record] = []
        self._now = utcnow()
        # Ids are allocated in increasing order inside one transaction, so any instance above
        # this watermark was written by this very file: meeting it again means a duplicate id.
        self._watermark = session.scalar(select(func.coalesce(func.max(Instance.id), 0))) or 0

    def add(self, record: Record) -> None:
        """Queue one record; a full chunk is written at once."""
        self._buffer.append(record)
        if len(self._buffer) >= self.chunk_size:
            self._write_chunk()

    def close(self) -> ImportCounts:
        """Write what is left and return this file's counts."""
        if self._buffer:
            self._write_chunk()
        return self.counts

    def _write_chunk(self) -> None:
        records, self._buffer = self._buffer, []
        for record in records:
            self._validate(record)
        ids, preexisting = self._write_instances(records)
        self._write_labels(records, ids, preexisting)
        self._write_scores(records, ids, preexisting)
        self._write_predictions(records, ids, preexisting)
        self._write_judgments(records, ids, preexisting)
        # The collector is paused while records stream (write_records): what cycles the chunk
        # left are collected here, once per chunk.
        collect_young()

    def _validate(self, record: Record) -> None:
        # Checked here, not by the database, so SQLite and PostgreSQL refuse the same input.
        for value, field in (
            (record.external_id, self.fields.external_id),
            (record.group_key, self.fields.group_key),
        ):
            if not value or len(value) > MAX_ID_LENGTH:
                raise InvalidInput(
                    f"needs 1 to {MAX_ID_LENGTH} characters",
                    file=self.file,
                    line=record.line,
                    field=field,
                )
        if _CONTROL.search(record.external_id):
            # A line break or tab in an id is stored but its page cannot be routed (404).
            raise InvalidInput(
                f"an id holds no control characters (line breaks, tabs), got "
                f"{record.external_id!r}",
                file=self.file,
                line=record.line,
                field=self.fields.external_id,
            )
        # Readers refuse such text in what they read; payloads are also built (option lists).
        if found := find_unstorable(record.payload):
            top = found[0].split(".", 1)[0].split("[", 1)[0]
            raise InvalidInput(
                found[1], file=self.file, line=record.line, field=self.fields.of_payload(top)
            )
        for j in record.judgments:
            if reason := unstorable(j.raw_output):
                raise InvalidInput(reason, file=self.file, line=record.line, field=j.field)

    def _write_instances(self, records: list[Record]) -> tuple[dict[str, int], set[int]]:
        """Insert new instances; return every record's instance id and the pre-existing ones."""
        first_line: dict[str, int] = {}
        for record in records:
            if record.external_id in first_line:
                raise self._duplicate(record, f"also on line {first_line[record.external_id]}")
            first_line[record.external_id] = record.line
        stored = {
            ext: (iid, group, payload)
            for iid, ext, group, payload in self.session.execute(
                select(
                    Instance.id, Instance.external_id, Instance.group_key, Instance.payload
                ).where(
                    Instance.benchmark_id == self.benchmark_id,
                    one_of(self.session, Instance.external_id, list(first_line)),
                )
            )
        }
        ids: dict[str, int] = {}
        preexisting: set[int] = set()
        new: list[tuple[str, str, dict[str, Any], str]] = []
        for record in records:
            found = stored.get(record.external_id)
            if found is None:
                new.append(
                    (
                        record.external_id,
                        record.group_key,
                        record.payload,
                        natural_key(record.external_id),
                    )
                )
                continue
            iid, group, payload = found
            if iid > self._watermark:
                raise self._duplicate(record, "also earlier in this file")
            self._check_instance(record, group, payload)
            ids[record.external_id] = iid
            preexisting.add(iid)
        self.counts.instances_skipped += len(preexisting)
        if new:
            bulk_insert(
                self.session,
                _instances,
                ("external_id", "group_key", "payload", "sort_key"),
                new,
                {"benchmark_id": self.benchmark_id, "created_at": self._now},
            )
            # Read the new ids back by external id: COPY and executemany return nothing.
            q = select(Instance.id, Instance.external_id).where(
                Instance.benchmark_id == self.benchmark_id,
                one_of(self.session, Instance.external_id, [row[0] for row in new]),
            )
            ids.update({ext: iid for iid, ext in self.session.execute(q)})
            self.counts.instances_added += len(new)
        return ids, preexisting

    def _duplicate(self, record: Record, where: str) -> InvalidInput:
        return InvalidInput(
            f"duplicate id {record.external_id!r} ({where})",
            file=self.file,
            line=record.line,
            field=self.fields.external_id,
        )

    def _check_instance(self, record: Record, group: str, payload: dict[str, Any]) -> None:
        what = f"instance {record.external_id!r} already exists with"
        if group != record.group_key:
            raise conflict(
                self.file,
                record.line,
                self.fields.group_key,
                f"{what} group {_show(group)}, the file says {_show(record.group_key)}",
            )
        key = _first_difference(payload, record.payload)
        if key is not None:
            old, new = payload.get(key, _MISSING), record.payload.get(key, _MISSING)
            raise conflict(
                self.file,
                record.line,
                self.fields.of_payload(key),
                f"{what} a different {key}: stored "
                f"{'nothing' if old is _MISSING else _show(old)}, "
                f"the file says {'nothing' if new is _MISSING else _show(new)}",
            )

    def _write_labels(
        self, records: list[Record], ids: dict[str, int], preexisting: set[int]
    ) -> None:
        wanted = [
            (ids[r.external_id], name, value, r)
            for r in records
            for name, value in r.labels.items()
        ]
        if not wanted:
            return
        stored: dict[tuple[int, str], str | None] = {}
        old_ids = [iid for iid, _, _, _ in wanted if iid in preexisting]
        if old_ids:
            # Compare with what earlier imports said, not with the current value: an annotator's
            # later relabel must neither block a re-import nor be overwritten by it.
            q = (
                select(LabelEvent.instance_id, LabelEvent.label_name, LabelEvent.value)
                .where(
                    one_of(self.session, LabelEvent.instance_id, old_ids),
                    LabelEvent.source == IMPORT_SOURCE,
                    LabelEvent.label_name.in_(sorted({name for _, name, _, _ in wanted})),
                )
                .order_by(LabelEvent.id)
            )
            stored = {(iid, name): value for iid, name, value in self.session.execute(q)}
        rows = []
        for iid, name, value, record in wanted:
            old = stored.get((iid, name), _MISSING)
            if old is _MISSING:
                rows.append((iid, name, value))
            elif old == value:
                self.counts.labels_skipped += 1
            else:
                raise conflict(
                    self.file,
                    record.line,
                    self.fields.of_label(name),
                    f"label {name!r} of {record.external_id!r} was imported as {_show(old)}, "
                    f"the file says {_show(value)}",
                )
        if rows:
            constants = {
                "source": IMPORT_SOURCE,
                "author": "",
                "reason": f"imported from {Path(self.file).name}",
                "tags": [],
                "created_at": self._now,
            }
            columns = ("instance_id", "label_name", "value")
            self.counts.labels_added += bulk_insert(self.session, _labels, columns, rows, constants)

    def _write_scores(
        self, records: list[Record], ids: dict[str, int], preexisting: set[int]
    ) -> None:
        def same(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
            close = math.isclose(old[0], new[0], rel_tol=1e-9, abs_tol=1e-12)
            return close and not _differs(old[1], new[1])

        def says(old: tuple[Any, ...], new: tuple[Any, ...]) -> str:
            if _differs(old[1], new[1]):
                return (
                    f"score {old[0]!r} (details {_show(old[1])}), the file gives "
                    f"{new[0]!r} (details {_show(new[1])})"
                )
            return f"score {old[0]!r}, the file gives {new[0]!r}"

        def rows(r: Record, iid: int) -> list[tuple[Any, ...]]:
            return [(s.detector_id, iid, s.score, s.details) for s in r.scores]

        def fields(r: Record) -> list[str]:
            return [s.field for s in r.scores]

        added, skipped = self._write_per_detector(
            _scores, (Score.score, Score.details), records, ids, preexisting, rows, fields, same,
            says,
        )  # fmt: skip
        self.counts.scores_added += added
        self.counts.scores_skipped += skipped

    def _write_predictions(
        self, records: list[Record], ids: dict[str, int], preexisting: set[int]
    ) -> None:
        what = ("answer", "probabilities", "details")

        def same(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
            return not any(_differs(a, b) for a, b in zip(old, new, strict=True))

        def says(old: tuple[Any, ...], new: tuple[Any, ...]) -> str:
            at = next(i for i, (a, b) in enumerate(zip(old, new, strict=True)) if _differs(a, b))
            return f"{what[at]} {_show(old[at])}, the file gives {_show(new[at])}"

        def rows(r: Record, iid: int) -> list[tuple[Any, ...]]:
            return [
                (p.detector_id, iid, p.answer, p.probabilities, p.details) for p in r.predictions
            ]

        def fields(r: Record) -> list[str]:
            return [p.field for p in r.predictions]

        columns = (Prediction.answer, Prediction.probabilities, Prediction.details)
        added, skipped = self._write_per_detector(
            _predictions, columns, records, ids, preexisting, rows, fields, same, says
        )
        self.counts.predictions_added += added
        self.counts.predictions_skipped += skipped

    def _write_per_detector(
        self,
        table: Table,
        columns: tuple[Any, ...],
        records: list[Record],
        ids: dict[str, int],
        preexisting: set[int],
        rows_of: Callable[[Record, int], list[tuple[Any, ...]]],
        fields_of: Callable[[Record], list[str]],
        same: Callable[[tuple[Any, ...], tuple[Any, ...]], bool],
        says: Callable[[tuple[Any, ...], tuple[Any, ...]], str],
    ) -> tuple[int, int]:
        """Insert rows unique per (detector, instance); return (added, skipped).

        ``rows_of(record, instance id)`` gives the record's rows as ``(detector id, instance
        id, *values)`` with ``values`` in ``columns`` order, and ``fields_of(record)`` the input
        field behind each. For an instance that existed before this file, a stored row whose
        values ``same(stored, values)`` holds for is skipped and a different one is a conflict
        worded by ``says(stored, values)``; a new instance has nothing stored.
        """
        old_ids = [ids[r.external_id] for r in records if ids[r.external_id] in preexisting]
        stored: dict[tuple[int, int], tuple[Any, ...]] = {}
        if old_ids:
            detectors = sorted({row[0] for r in records for row in rows_of(r, 0)})
            detector_col, instance_col = table.c.detector_id, table.c.instance_id
            q = select(detector_col, instance_col, *columns).where(
                one_of(self.session, instance_col, old_ids), detector_col.in_(detectors)
            )
            stored = {(d, i): tuple(rest) for d, i, *rest in self.session.execute(q)}

        # Whole rows, built once per value: a million-row import makes tens of millions of them.
        new: list[tuple[Any, ...]] = []
        skipped = 0
        for record in records:
            iid = ids[record.external_id]
            if iid not in preexisting:  # a new instance has nothing stored: no lookups
                new.extend(rows_of(record, iid))
                continue
            for row, field in zip(rows_of(record, iid), fields_of(record), strict=True):
                old = stored.get((row[0], iid))
                if old is None:
                    new.append(row)
                elif same(old, row[2:]):
                    skipped += 1
                else:
                    raise conflict(
                        self.file,
                        record.line,
                        field,
                        f"{record.external_id!r} already has {says(old, row[2:])}",
                    )
        if not new:
            return 0, skipped
        # A column every new row leaves empty (no probabilities, no details: the usual import)
        # is written as a constant, which spares converting it row by row.
        constants: dict[str, Any] = {"created_at": self._now}
        keep = [0, 1]
        for j, column in enumerate(columns, start=2):
            first = new[0][j]
            if first in (None, {}) and all(map(eq, map(itemgetter(j), new), repeat(first))):
                constants[column.key] = first
            else:
                keep.append(j)
        names = ("detector_id", "instance_id", *(columns[j - 2].key for j in keep[2:]))
        if len(keep) < len(new[0]):
            new = list(map(itemgetter(*keep), new))
        return bulk_insert(self.session, table, names, new, constants), skipped

    def _write_judgments(
        self, records: list[Record], ids: dict[str, int], preexisting: set[int]
    ) -> None:
        wanted = [(ids[r.external_id], j, r) for r in records for j in r.judgments]
        if not wanted:
            return
        stored: dict[tuple[int, int, str], dict[str, Any]] = {}
        old_ids = [iid for iid, _, _ in wanted if iid in preexisting]
        if old_ids:
            q = select(
                Judgment.detector_id,
                Judgment.instance_id,
                Judgment.order,
                Judgment.choice,
                Judgment.raw_output,
                Judgment.confidence,
                Judgment.details,
            ).where(
                one_of(self.session, Judgment.instance_id, old_ids),
                Judgment.detector_id.in_(sorted({j.detector_id for _, j, _ in wanted})),
            )
            stored = {
                (d, i, o): {"choice": c, "raw_output": raw, "confidence": conf, "details": det}
                for d, i, o, c, raw, conf, det in self.session.execute(q)
            }
        rows = []
        for iid, judgment, record in wanted:
            old = stored.get((judgment.detector_id, iid, judgment.order))
            if old is None:
                rows.append(
                    (
                        iid,
                        judgment.detector_id,
                        judgment.order,
                        judgment.raw_output,
                        judgment.choice,
                        judgment.confidence,
                        judgment.details,
                    )
                )
                continue
            new = {
                "choice": judgment.choice,
                "raw_output": judgment.raw_output,
                "confidence": judgment.confidence,
                "details": judgment.details,
            }
            key = _first_difference(old, new)
            if key is None:
                self.counts.judgments_skipped += 1
                continue
            raise conflict(
                self.file,
                record.line,
                judgment.field,
                f"the {judgment.order} judgment of {record.external_id!r} is stored with "
                f"{key} {_show(old[key])}, the file says {_show(new[key])}",
            )
        if rows:
            columns = (
                "instance_id",
                "detector_id",
                "order",
                "raw_output",
                "choice",
                "confidence",
                "details",
            )
            constants = {"mode": "imported", "created_at": self._now}
            self.counts.judgments_added += bulk_insert(
                self.session, _judgments, columns, rows, constants
            )


def write_records(
    session: Session,
    benchmark: Benchmark,
    file: str,
    records: Iterable[Record],
    fields: SourceFields,
    *,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportCounts:
    """Write a stream of records into ``benchmark`` (see :class:`RecordWriter`).

    Returns
    -------
    ImportCounts
        What this stream added and what was already present.

    Raises
    ------
    InvalidInput
        For a duplicate id within the stream or a value the store cannot hold.
    Conflict
        When a record contradicts what the store holds.

    """
    writer = RecordWriter(session, benchmark, file, fields, chunk_size)
    # Reading and mapping the records happens while this loop pulls them, so the pause covers
    # it too (app.ingest.gc_pause says why).
    with paused_gc():
        for record in records:
            writer.add(record)
        return writer.close()


def record_import(
    session: Session,
    benchmark: Benchmark,
    importer: str,
    path: str | os.PathLike[str],
    counts: ImportCounts,
    *,
    sha256: str | None = None,
    extra: dict[str, Any] | None = None,
) -> ImportRecord | None:
    """Keep the provenance of an import that added anything: file name, content hash, counts."""
    if counts.added == 0:
        return None
    row = ImportRecord(
        benchmark_id=benchmark.id,
        importer=importer,
        file_name=Path(path).name[:500],
        sha256=sha256 or file_sha256(path),
        counts={**counts.as_dict(), **(extra or {})},
    )
    session.add(row)
    session.flush()
    return row
