"""The job kinds a worker can run, each mapped to its handler."""

from __future__ import annotations

from app.judging.params import JUDGE_JOB
from workers.extract_job import EXTRACT_JOB, run_extract_job
from workers.judge_job import run_judge_job
from workers.runner import Handler

HANDLERS: dict[str, Handler] = {JUDGE_JOB: run_judge_job, EXTRACT_JOB: run_extract_job}
