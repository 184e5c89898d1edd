"""What the New benchmark page shows of an upload: its columns, first rows, and a likely importer.

A glance, not an import: the importer reads the whole file in the worker and refuses bad rows
there with ``file:line: field: reason``. Reading stops after a few rows (a JSON array is only
previewed up to a size: it has no rows before it is parsed whole).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

PREVIEW_ROWS = 5
JSON_PREVIEW_BYTES = 20 * 2**20

# Columns that name a layout: the importer offered first when a file has all of them.
SIGNATURES: tuple[tuple[str, frozenset[str]], ...] = (
    ("judgebench", frozenset({"pair_id", "response_A", "response_B"})),
    ("mmlu-redux", frozenset({"question", "choices", "answer", "error_type"})),
    ("arena-hard", frozenset({"question_id", "model", "games"})),
    ("mtbench-judgments", frozenset({"question_id", "model_1", "model_2", "g1_winner"})),
    ("mtbench-judgments", frozenset({"question_id", "model", "judge", "score"})),
    ("alpaca-eval", frozenset({"instruction", "generator_1", "generator_2", "preference"})),
    # A .json Inspect log is one object; its top-level keys are the preview's columns.
    ("inspect", frozenset({"version", "status", "eval", "samples"})),
    # A HELM scenario_state.json, uploaded alone.
    ("helm", frozenset({"adapter_spec", "request_states"})),
)


@dataclass(frozen=True)
class Preview:
    """An upload's columns (in file order), its first rows as text, and the importer guessed.

    ``note`` says why there is no preview (an unreadable or very large JSON file).
    """

    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    importer: str = "table"
    note: str = ""


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


def preview(path: Path) -> Preview:
    """The columns and first rows of an uploaded file, and the importer its columns suggest."""
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
