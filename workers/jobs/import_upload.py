"""The ``import_upload`` job: an uploaded file read by its importer, in one transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.alpaca_eval import import_alpaca_eval
from app.ingest.arena_hard import import_arena_hard
from app.ingest.judgebench import import_judgebench
from app.ingest.lm_eval import import_lm_eval
from app.ingest.mmlu_redux import import_mmlu_redux
from app.ingest.mtbench_judgments import import_mtbench_judgments
from app.ingest.records import ImportSummary
from app.ingest.table import import_table
from app.services.jobs.import_upload import IMPORTERS, ImportUploadParams, upload_path
from workers.runner import JobContext, handles

Importer = Callable[[Session, Path, ImportUploadParams], ImportSummary]


def _table(session: Session, path: Path, p: ImportUploadParams) -> ImportSummary:
    return import_table(
        session,
        path,
        str(p.table_kind),
        p.mapping,
        labels=p.labels,
        scores=p.scores,
        id_column=p.id_column or None,
        benchmark=p.benchmark,
    )


def _mtbench_judgments(session: Session, path: Path, p: ImportUploadParams) -> ImportSummary:
    # One summary per benchmark written (pair judgments, single grades): told as one import.
    first, *later = import_mtbench_judgments(session, [path], benchmark=p.benchmark)
    for summary in later:
        first.merge(summary)
    return first


IMPORT: dict[str, Importer] = {
    "table": _table,
    "mmlu-redux": lambda s, path, p: import_mmlu_redux(s, [path], p.benchmark),
    "judgebench": lambda s, path, p: import_judgebench(s, [path], benchmark=p.benchmark),
    "alpaca-eval": lambda s, path, p: import_alpaca_eval(s, [path], benchmark=p.benchmark),
    "arena-hard": lambda s, path, p: import_arena_hard(s, [path], benchmark=p.benchmark),
    "mtbench-judgments": _mtbench_judgments,
    "lm-eval": lambda s, path, p: import_lm_eval(s, [path], benchmark=p.benchmark),
}
assert set(IMPORT) == set(IMPORTERS), "every importer the page offers has a reader here"


@handles(ImportUploadParams)
def run_import_upload(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``import_upload`` jobs: the whole file in one write, or nothing.

    A refused file fails the job with ``file:line: field: reason`` (no retry: it would fail
    the same way) and leaves the store as it was.
    """
    params = ImportUploadParams.from_dict(ctx.params)
    path = upload_path(ctx.store.settings.data_dir, params.upload, params.filename)
    if not path.is_file():
        raise InvalidInput(f"the uploaded file is gone ({path.name})", field="upload")
    ctx.progress(0, 1)
    summary = ctx.commit(lambda s: IMPORT[params.importer](s, path, params), done=1, total=1)
    counts = {k: v for k, v in asdict(summary).items() if isinstance(v, int)}
    return {"benchmark": summary.benchmark or params.benchmark, "file": path.name, **counts}
