"""The job kinds a worker can run, each mapped to its handler."""

from __future__ import annotations

from app.judging.params import JUDGE_JOB
from workers.extract_job import EXTRACT_JOB, run_extract_job
from workers.judge_job import run_judge_job
from workers.probe_jobs import (
    APPLY_PROBE_JOB,
    FIT_LIE_PROBE_JOB,
    FIT_PROBE_JOB,
    run_apply_probe,
    run_fit_lie_probe,
    run_fit_probe,
)
from workers.runner import Handler

HANDLERS: dict[str, Handler] = {
    JUDGE_JOB: run_judge_job,
    EXTRACT_JOB: run_extract_job,
    FIT_PROBE_JOB: run_fit_probe,
    FIT_LIE_PROBE_JOB: run_fit_lie_probe,
    APPLY_PROBE_JOB: run_apply_probe,
}
