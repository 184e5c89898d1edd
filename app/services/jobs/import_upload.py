"""The ``import_upload`` job kind: a file uploaded on the New benchmark page, imported by a worker.

The page streams the file to ``<data dir>/uploads/<upload id>/`` and queues this job; the
worker runs the chosen importer in one transaction, so a refused file (``file:line: field:
reason`` on the job's page) changes nothing. Queued by the page only (an admin's), never from
a path a request names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.errors import InvalidInput
from app.services.evidence.benchmarks import check_benchmark_name
from app.services.jobs.kind import JobLink, JobParams, job_kind

UPLOADS = "uploads"
"""The data directory's folder of uploaded files, one folder per upload."""

IMPORTERS: dict[str, str] = {
    "table": "A CSV, JSONL, JSON-array or Parquet table, its columns mapped to an item's fields",
    "mmlu-redux": "MMLU-Redux subject files (question, choices, answer, error_type)",
    "judgebench": "JudgeBench pairs (pair_id, question, response_A/B, label)",
    "alpaca-eval": "AlpacaEval annotations.json (one presentation order per item)",
    "arena-hard": "Arena-Hard-Auto judgments (games[0] and games[1] as both orders)",
    "mtbench-judgments": "FastChat MT-Bench judgments (*_pair.jsonl, *_single.jsonl)",
    "mtbench-human": "MT-Bench human judgments: one vote per annotator on label set human",
    "inspect": "Inspect AI log (.eval or .json): one benchmark per task, one detector per model",
    "helm": "HELM multiple-choice run folder (a zip of it, or its scenario_state.json)",
    "lm-eval": "lm-evaluation-harness samples_<task>_<time>.jsonl (--log_samples output)",
}
"""The importers the page offers, by name, with what they read (the worker maps each name)."""

TABLE_KINDS = ("statement", "response", "pairwise", "choice", "answer")
_UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
# A bare file name: no folder part, nothing hidden.
_FILE_NAME = re.compile(r"[^/\\\x00-\x1f]{1,200}")


def upload_path(data_dir: Path, upload: str, filename: str) -> Path:
    """Where upload ``upload``'s file ``filename`` lives (both checked: no path escapes)."""
    if not _UPLOAD_ID.fullmatch(upload):
        raise InvalidInput("not an upload id", field="upload")
    if not _FILE_NAME.fullmatch(filename) or filename.startswith("."):
        raise InvalidInput("not a plain file name", field="filename")
    return data_dir / UPLOADS / upload / filename


@job_kind
@dataclass(frozen=True)
class ImportUploadParams(JobParams):
    """An uploaded file, the importer to read it with, the benchmark, and a table's mapping.

    ``mapping`` is ``{payload field: column}``, ``labels`` ``{label set: column}`` and
    ``scores`` ``{detector: column}``: a table's (the other importers read fixed layouts).
    """

    kind = "import_upload"
    title = "Import an uploaded file"
    startable = False

    upload: str
    filename: str
    importer: str
    benchmark: str
    table_kind: str | None = None
    id_column: str | None = None
    mapping: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    scores: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        """A known importer, a benchmark name, a table's kind and at least one mapped field."""
        upload_path(Path("."), self.upload, self.filename)
        if self.importer not in IMPORTERS:
            raise InvalidInput(f"choose one of {', '.join(IMPORTERS)}", field="importer")
        name = self.benchmark.strip()
        if not name or len(name) > 200 or "/" in name or re.search(r"[\x00-\x1f]", name):
            raise InvalidInput("a name of 1 to 200 characters, no '/'", field="benchmark")
        check_benchmark_name(name)
        if self.importer != "table":
            return
        if self.table_kind not in TABLE_KINDS:
            raise InvalidInput(f"choose one of {', '.join(TABLE_KINDS)}", field="table_kind")
        if not self.mapping:
            raise InvalidInput("map at least one column to a field", field="mapping")
        for what, pairs in (("mapping", self.mapping), ("labels", self.labels)):
            for key, column in pairs.items():
                if not key.strip() or not column.strip():
                    raise InvalidInput("each pair needs a name and a column", field=what)

    def describe(self) -> str:
        """E.g. "Import results.csv into my-bench (table, statement items)"."""
        how = self.importer
        if self.importer == "table":
            how += f", {self.table_kind} items"
        return f"Import {self.filename} into {self.benchmark} ({how})"

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The benchmark it imported into."""
        return [JobLink(f"{self.benchmark}: the instance table", "table", self.benchmark)]
