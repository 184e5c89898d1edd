"""The job kinds a worker can run, each mapped to its handler."""

from __future__ import annotations

from typing import Any

from app.ingest.lie.builders import build_dataset
from app.services.jobs.answer import ANSWER_CHOICES_JOB
from app.services.jobs.build_dataset import BUILD_DATASET_JOB
from app.services.jobs.judge import JUDGE_JOB
from app.services.metrics.rankers import RANK_ERRORS_JOB
from workers.jobs.answer import run_answer_choices
from workers.jobs.extract import EXTRACT_JOB, run_extract_job
from workers.jobs.judge import run_judge_job
from workers.jobs.metrics import COMPUTE_METRICS_JOB, run_compute_metrics
from workers.jobs.probes import (
    APPLY_PROBE_JOB,
    FIT_LIE_PROBE_JOB,
    FIT_PROBE_JOB,
    run_apply_probe,
    run_fit_lie_probe,
    run_fit_probe,
)
from workers.jobs.rank_errors import run_rank_errors
from workers.jobs.set_probe import FIT_SET_PROBE_JOB, run_fit_set_probe
from workers.runner import Handler, JobContext


def run_build_dataset(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``build_dataset`` jobs: one transaction, progress 0 then 1 of 1."""
    ctx.progress(0, 1)
    lines = ctx.commit(lambda session: build_dataset(session, ctx.params), done=1, total=1)
    return {"summaries": lines}


HANDLERS: dict[str, Handler] = {
    JUDGE_JOB: run_judge_job,
    EXTRACT_JOB: run_extract_job,
    FIT_PROBE_JOB: run_fit_probe,
    FIT_LIE_PROBE_JOB: run_fit_lie_probe,
    APPLY_PROBE_JOB: run_apply_probe,
    BUILD_DATASET_JOB: run_build_dataset,
    ANSWER_CHOICES_JOB: run_answer_choices,
    RANK_ERRORS_JOB: run_rank_errors,
    FIT_SET_PROBE_JOB: run_fit_set_probe,
    COMPUTE_METRICS_JOB: run_compute_metrics,
}
