"""Where a finished job's output is: the pages a job page links to, by job kind."""

from __future__ import annotations

from typing import Any, NamedTuple

from app.services.evidence.flips import flip_label_name
from app.services.jobs.answer import ANSWER_CHOICES_JOB
from app.services.jobs.judge import JUDGE_JOB
from app.services.jobs.probes import APPLY_PROBE_JOB, FIT_LIE_PROBE_JOB, FIT_PROBE_JOB
from app.services.metrics.rankers import RANK_ERRORS_JOB
from app.services.table.instance_filter import FlipState, InstanceFilter
from app.tables import Job, JobStatus, Order
from app.web.urls import benchmark_url, metrics_url

PROBES_URL = "/probes"
# workers.jobs.extract.EXTRACT_JOB (the web layer does not import workers).
EXTRACT_JOB = "extract"


class JobLink(NamedTuple):
    """One link of a job page: its text and where it goes."""

    text: str
    url: str


def _scored_by(benchmark: str, detector: str) -> str:
    # Judges' and probes' scores are probabilities: ">= 0" keeps every item the detector scored.
    return benchmark_url(benchmark, InstanceFilter(score_detector=detector, score_min=0.0))


def _flip_metrics(benchmark: str, judge: str) -> str:
    return metrics_url(benchmark, label=flip_label_name(judge))


def _judge_links(params: dict[str, Any], result: dict[str, Any]) -> list[JobLink]:
    bench, judge = params["benchmark"], params["judge"]
    both = {Order.AB.value, Order.BA.value} <= set(params.get("orders") or ())
    if not both or not result.get("retained_pairs"):
        # One order (or nothing valid in both): no flip labels and no score to show.
        return [JobLink(f"{bench}: the instance table", benchmark_url(bench))]
    return [
        JobLink(f"Metrics of {flip_label_name(judge)}", _flip_metrics(bench, judge)),
        JobLink("Its score beside the other detectors (metric matrix)", metrics_url(bench)),
        JobLink("The pairs it scored (instance table)", _scored_by(bench, judge)),
        JobLink(
            "Its flipped pairs",
            benchmark_url(bench, InstanceFilter(judge=judge, flip=FlipState.yes)),
        ),
    ]


def _probe_links(params: dict[str, Any], result: dict[str, Any]) -> list[JobLink]:
    links = [JobLink("The probes page", PROBES_URL)]
    bench = result.get("benchmark") or params.get("benchmark")
    if bench is None:
        return links
    if "judge" in params:  # a flip probe, measured on its judge's flip labels
        links.append(JobLink("Metrics of its flip labels", _flip_metrics(bench, params["judge"])))
    elif "label" in params:
        label = params["label"]
        links.append(JobLink(f"Metrics of {label}", metrics_url(bench, label=label)))
    if "scored" in result:  # an applied probe: its scores on the target benchmark
        probe = result["probe"]
        links.append(JobLink(f"{probe}'s scores (instance table)", _scored_by(bench, probe)))
        links.append(JobLink(f"Metrics of {bench}", metrics_url(bench)))
    return links


def job_links(job: Job) -> list[JobLink]:
    """The pages showing what a finished (``done``) job produced; none for any other job."""
    if job.status != JobStatus.done.value:
        return []
    params, result = job.params or {}, job.result or {}
    if job.kind == JUDGE_JOB:
        return _judge_links(params, result)
    if job.kind in (FIT_PROBE_JOB, FIT_LIE_PROBE_JOB, APPLY_PROBE_JOB):
        return _probe_links(params, result)
    links = []
    if job.kind == EXTRACT_JOB:
        links.append(JobLink("Fit a probe on its activations (probes page)", PROBES_URL))
    bench = params.get("benchmark") or result.get("benchmark")
    if bench:
        if job.kind in (ANSWER_CHOICES_JOB, RANK_ERRORS_JOB):
            links.append(JobLink(f"Metrics of {bench}", metrics_url(bench)))
        links.append(JobLink(f"{bench}: the instance table", benchmark_url(bench)))
    return links
