"""True/false statement sets (``statement,label`` tables) as ``statement`` benchmarks."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.orm import Session

from app.ingest.records import ImportSummary
from app.ingest.table import TableSpec, import_spec
from app.ingest.writer import DEFAULT_CHUNK_ROWS
from app.tables import BenchmarkKind

TRUTH_LABEL = "truth"
# Columns that tie statements about one subject together (cities/neg_cities: the city), so that
# every grouped split keeps a subject's true, false and negated variants in one fold.
GROUP_COLUMNS = ("group", "group_key", "city")


def import_statements(
    session: Session,
    csv_path: str | os.PathLike[str],
    benchmark: str | None = None,
    *,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportSummary:
    """Import a true/false statement table (``statement,label`` plus any extra columns).

    Each row becomes one instance: external id ``<file stem>:<data row number>`` (the sets
    contain repeated statements, so the text cannot be the id; the position is stable for the
    same file), payload ``{statement, dataset: <file stem>, <every other column>}``, label set
    ``truth`` = ``"1"``/``"0"`` (``1.0``/``0.0`` accepted; an empty cell leaves the statement
    unlabelled). The group is the first of the columns ``group``, ``group_key``, ``city`` that
    exists, else the row's own id. Several files can share one benchmark: ids stay distinct
    through the stem, and ``dataset`` is a slice.

    Parameters
    ----------
    session
        The caller's session; flushed, never committed.
    csv_path
        The table (CSV, or JSONL/Parquet with the same columns).
    benchmark
        Target benchmark of kind ``statement``; defaults to the file stem.
    chunk_size
        Rows per bulk write.

    Raises
    ------
    InvalidInput
        For a missing ``statement``/``label`` column, a label other than 0/1, bad encoding and
        the other cases of :func:`app.ingest.table.import_table`.
    Conflict
        When a row contradicts what an earlier import stored.

    """
    stem = Path(csv_path).stem
    spec = TableSpec(
        kind=BenchmarkKind.statement,
        mapping={"statement": "statement"},
        group_candidates=GROUP_COLUMNS,
        labels={TRUTH_LABEL: "label"},
        extra_columns=True,
        constants={"dataset": stem},
    )
    return import_spec(
        session,
        csv_path,
        spec,
        benchmark=benchmark or stem,
        importer="statements",
        description="True/false statements (label set 'truth': 1 = true, 0 = false).",
        source=f"imported from {Path(csv_path).name}",
        chunk_size=chunk_size,
    )
