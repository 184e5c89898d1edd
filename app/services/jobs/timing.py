"""How long jobs take: a job's elapsed time and ETA, and a judge model's recent throughput.

The ETA extrapolates the job's own pace (units done since it started); the judge form's
estimate extrapolates the pace of the model's last finished judge jobs, so a user choosing a
sample size sees what it costs before queueing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.tables import Job, JobStatus, as_utc, utcnow

# The finished judge jobs a model's throughput is read from: the most recent ones, since a
# machine or a batch size changes over time.
RECENT_JOBS = 5
# Finished judge jobs read to find RECENT_JOBS of one model (parameters are JSON, so the model
# is matched here, not in SQL; 200 rows is cheap and spans many models).
_SCAN = 200


def duration_text(delta: timedelta) -> str:
    """``delta`` in words a person reads at a glance: "45 s", "3 min 5 s", "2 h 10 min"."""
    seconds = max(0, round(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


@dataclass(frozen=True)
class JobTiming:
    """A job's time so far (or in all, once finished) and, while it runs, the time left."""

    elapsed: timedelta | None
    eta: timedelta | None
    finished: bool

    @property
    def text(self) -> str:
        """E.g. "elapsed 1 min 3 s, about 2 min left", "took 5 min"; "" before it starts."""
        if self.elapsed is None:
            return ""
        if self.finished:
            return f"took {duration_text(self.elapsed)}"
        text = f"elapsed {duration_text(self.elapsed)}"
        if self.eta is not None:
            text += f", about {duration_text(self.eta)} left"
        return text


def job_timing(job: Job, now: datetime | None = None) -> JobTiming:
    """The elapsed time of ``job`` and its ETA from its progress (none until a unit is done)."""
    if job.started_at is None:
        return JobTiming(None, None, finished=False)
    started = as_utc(job.started_at)
    finished = job.status not in (JobStatus.queued.value, JobStatus.running.value)
    if finished and job.finished_at is not None:
        return JobTiming(as_utc(job.finished_at) - started, None, finished=True)
    if job.status != JobStatus.running.value:
        # Queued again after a retry: its old start says nothing about the time left.
        return JobTiming(None, None, finished=False)
    elapsed = (now or utcnow()) - started
    eta = None
    done, total = job.progress_done, job.progress_total
    if total and 0 < done <= total:
        eta = elapsed * ((total - done) / done)
    return JobTiming(elapsed, eta, finished=False)


@dataclass(frozen=True)
class Throughput:
    """Judgments per second of a model over its last finished judge jobs."""

    model: str
    per_second: float
    jobs: int

    def estimate(self, units: int) -> timedelta:
        """The time ``units`` judgments take at this pace."""
        return timedelta(seconds=units / self.per_second)


def judge_throughput(session: Session, model: str) -> Throughput | None:
    """``model``'s judgments per second over its :data:`RECENT_JOBS` last finished judge jobs.

    None when it has finished none with progress (then the form says "no estimate yet").
    """
    rows = session.scalars(
        select(Job)
        .where(
            Job.kind == "judge",
            Job.status == JobStatus.done.value,
            Job.started_at.is_not(None),
            Job.finished_at.is_not(None),
            Job.progress_done > 0,
        )
        .order_by(Job.finished_at.desc(), Job.id.desc())
        .limit(_SCAN)
    )
    units, seconds, jobs = 0, 0.0, 0
    for job in rows:
        if (job.params or {}).get("model") != model:
            continue
        assert job.started_at is not None and job.finished_at is not None
        units += job.progress_done
        seconds += (as_utc(job.finished_at) - as_utc(job.started_at)).total_seconds()
        jobs += 1
        if jobs == RECENT_JOBS:
            break
    if not jobs or seconds <= 0:
        return None
    return Throughput(model, units / seconds, jobs)


def judge_units(limit: int | None, orders: int, repeat_subset: int, pairs: int) -> int:
    """Judgments a judge job makes: each sampled pair in each order, plus the AB repeats."""
    sampled = pairs if limit is None else min(limit, pairs)
    return sampled * orders + min(repeat_subset, sampled)
