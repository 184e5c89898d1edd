"""What the New benchmark page shows of an upload: its columns, first rows, and a likely importer.

A glance, not an import: the importer reads the whole file in the worker and refuses bad rows
there with ``file:line: field: reason``. Reading stops after a few rows (a JSON array is only
previewed up to a size: it has no rows before it is parsed whole). A zip's preview lists its
files and shows the first data file's rows.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from app.services.jobs.upload_files import DATA_SUFFIXES, extracted_folder, is_zip, upload_files

PREVIEW_ROWS = 5
LISTED_FILES = 200
JSON_PREVIEW_BYTES = 20 * 2**20

# Columns that name a layout: the importer offered first when a file has all of them.
SIGNATURES: tuple[tuple[str, frozenset[str]], ...] = (
    ("judgebench", frozenset({"pair_id", "response_A", "response_B"})),
    ("mmlu-redux", frozenset({"question", "choices", "answer", "error_type"})),
    ("arena-hard", frozenset({"question_id", "model", "games"})),
    ("mtbench-judgments", frozenset({"question_id", "model_1", "model_2", "g1_winner"})),
    ("mtbench-judgments", frozenset({"question_id", "model", "judge", "score"})),
    ("mtbench-human", frozenset({"question_id", "model_a", "model_b", "winner", "judge"})),
    ("alpaca-eval", frozenset({"instruction", "generator_1", "generator_2", "preference"})),
    # A .json Inspect log is one object; its top-level keys are the preview's columns.
    ("inspect", frozenset({"version", "status", "eval", "samples"})),
    # A HELM scenario_state.json, uploaded alone.
    ("helm", frozenset({"adapter_spec", "request_states"})),
)


@dataclass(frozen=True)
class Preview:
    """An upload's columns (in file order), its first rows as text, and the importer guessed.

    ``note`` says why there is no preview (an unreadable or very large JSON file). A zip's
    ``files`` are its extracted files (path in the zip, bytes; the first
    :data:`LISTED_FILES`), ``file_count`` how many there are, and ``previewed`` the one
    whose rows are shown.
    """

    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    importer: str = "table"
    note: str = ""
    files: list[tuple[str, int]] = field(default_factory=list)
    file_count: int = 0
    previewed: str | None = None


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 200 else text[:199] + "…"


def _records(path: Path) -> tuple[list[dict[str, Any]], str]:
    """The first rows of ``path`` as dicts, or a note saying why there are none."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8", errors="replace") as fh:
            reader = csv.DictReader(fh)
            return [dict(row) for _, row in zip(range(PREVIEW_ROWS), reader, strict=False)], ""
    if suffix in (".jsonl", ".ndjson"):
        rows = []
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if len(rows) == PREVIEW_ROWS:
                    break
                if line.strip():
                    value = json.loads(line)
                    rows.append(value if isinstance(value, dict) else {"value": value})
        return rows, ""
    if suffix in (".parquet", ".pq"):
        batches = pq.ParquetFile(path).iter_batches(batch_size=PREVIEW_ROWS)
        first = next(batches, None)
        return ([] if first is None else first.to_pylist()), ""
    if suffix == ".json":
        if path.stat().st_size > JSON_PREVIEW_BYTES:
            return [], "a JSON file this large is read whole by the importer: no preview"
        value = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        items = value if isinstance(value, list) else [value]
        return [r if isinstance(r, dict) else {"value": r} for r in items[:PREVIEW_ROWS]], ""
    return [], f"no preview of {suffix or 'extension-less'} files (CSV, JSONL, JSON, Parquet)"


def _file_preview(path: Path) -> Preview:
    """The columns and first rows of one data file, and the importer its columns suggest."""
    try:
        rows, note = _records(path)
    except (ValueError, OSError) as exc:  # json.JSONDecodeError and pyarrow's errors included
        return Preview(note=f"could not read a preview: {exc}")
    columns: list[str] = []
    for row in rows:
        columns += [str(k) for k in row if str(k) not in columns]
    guess = next((name for name, needs in SIGNATURES if needs <= set(columns)), "table")
    table = [[_cell(row.get(c, "")) for c in columns] for row in rows]
    return Preview(columns, table, guess, note)


def preview(path: Path) -> Preview:
    """What the page shows of an upload: a file's first rows, or a zip's files and first data file.

    A zip suggests the importer its first data file (in path order) suggests; one that holds
    several files is most likely a run folder, read by a folder importer.
    """
    if not is_zip(path.name):
        return _file_preview(path)
    folder = extracted_folder(path)
    files = upload_files(path)
    listed = [(p.relative_to(folder).as_posix(), p.stat().st_size) for p in files]
    data = next((p for p in files if p.suffix.lower() in DATA_SUFFIXES), None)
    if data is None:
        shown = Preview(note="the zip holds no CSV, JSONL, JSON or Parquet file to preview")
    else:
        shown = _file_preview(data)
    return Preview(
        shown.columns,
        shown.rows,
        shown.importer,
        shown.note,
        listed[:LISTED_FILES],
        len(listed),
        None if data is None else data.relative_to(folder).as_posix(),
    )
