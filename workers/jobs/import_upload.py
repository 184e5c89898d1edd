"""The ``import_upload`` job: an uploaded file or run folder read by its importer, in one write.

Progress is the bytes the importer has read of the upload's files (a zip's extracted files),
shown on the job page while the transaction runs (:meth:`JobContext.progress_aside`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.alpaca_eval import import_alpaca_eval
from app.ingest.arena_hard import import_arena_hard
from app.ingest.helm import import_helm
from app.ingest.inspect_logs import import_inspect_logs
from app.ingest.judgebench import import_judgebench
from app.ingest.lm_eval import import_lm_eval
from app.ingest.mmlu_redux import import_mmlu_redux
from app.ingest.mtbench_human import import_mtbench_human
from app.ingest.mtbench_judgments import import_mtbench_judgments
from app.ingest.progress import counting_reads
from app.ingest.records import ImportSummary
from app.ingest.table import import_table
from app.services.jobs.import_upload import IMPORTERS, ImportUploadParams, upload_path
from app.services.jobs.live_progress import clear_live_progress
from app.services.jobs.upload_files import import_target, upload_files
from app.services.jobs.warm_up import queue_warm_up
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


def _as_one(summaries: list[ImportSummary]) -> ImportSummary:
    """The summaries of an importer that writes several benchmarks, told as one import."""
    first, *later = summaries
    for summary in later:
        first.merge(summary)
    return first


def _mtbench_judgments(session: Session, path: Path, p: ImportUploadParams) -> ImportSummary:
    # One summary per benchmark written (pair judgments, single grades).
    return _as_one(import_mtbench_judgments(session, [path], benchmark=p.benchmark))


IMPORT: dict[str, Importer] = {
    "table": _table,
    "mmlu-redux": lambda s, path, p: import_mmlu_redux(s, [path], p.benchmark),
    "judgebench": lambda s, path, p: import_judgebench(s, [path], benchmark=p.benchmark),
    "alpaca-eval": lambda s, path, p: import_alpaca_eval(s, [path], benchmark=p.benchmark),
    "arena-hard": lambda s, path, p: import_arena_hard(s, [path], benchmark=p.benchmark),
    "mtbench-judgments": _mtbench_judgments,
    "mtbench-human": lambda s, path, p: import_mtbench_human(s, [path], benchmark=p.benchmark),
    # The page names one benchmark: every task of the log goes there (one task per log).
    "inspect": lambda s, path, p: _as_one(import_inspect_logs(s, [path], benchmark=p.benchmark)),
    "helm": lambda s, path, p: _as_one(import_helm(s, [path], benchmark=p.benchmark)),
    "lm-eval": lambda s, path, p: import_lm_eval(s, [path], benchmark=p.benchmark),
}
assert set(IMPORT) == set(IMPORTERS), "every importer the page offers has a reader here"


@handles(ImportUploadParams)
def run_import_upload(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``import_upload`` jobs: the whole file (or zip) in one write, or nothing.

    A zip's importer gets its extracted folder, or its one file for the importers of one file
    (:func:`app.services.jobs.upload_files.import_target`). A refused file fails the job with
    ``file:line: field: reason`` (no retry: it would fail the same way) and leaves the store as
    it was. Progress is bytes read of the upload's total bytes.
    """
    params = ImportUploadParams.from_dict(ctx.params)
    data_dir = ctx.store.settings.data_dir
    path = upload_path(data_dir, params.upload, params.filename)
    if not path.is_file():
        raise InvalidInput(f"the uploaded file is gone ({path.name})", field="upload")
    target = import_target(path, params.importer)
    total = sum(p.stat().st_size for p in upload_files(path)) or 1
    ctx.progress(0, total)

    def work(session: Session) -> ImportSummary:
        # Counted afresh on each attempt: a transaction retried after a lost connection
        # reads the files again from the start.
        with counting_reads(total, ctx.progress_aside):
            summary = IMPORT[params.importer](session, target, params)
        if summary.benchmark:
            queue_warm_up(session, summary.benchmark)  # lands with the import, or not at all
        return summary

    try:
        summary = ctx.commit(work, done=total, total=total)
    finally:
        clear_live_progress(data_dir, ctx.claim.job_id)
    counts = {k: v for k, v in asdict(summary).items() if isinstance(v, int)}
    return {"benchmark": summary.benchmark or params.benchmark, "file": path.name, **counts}
