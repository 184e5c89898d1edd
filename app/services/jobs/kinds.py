"""Every job kind: importing this module imports each kind module of the package.

Adding a job kind is adding one module to :mod:`app.services.jobs` (a :class:`JobParams`
subclass decorated with :func:`~app.services.jobs.kind.job_kind`) and its handler in
:mod:`workers.jobs`; nothing else lists kinds.
"""

from __future__ import annotations

import pkgutil
from importlib import import_module

import app.services.jobs as package
from app.errors import AppellateError
from app.services.jobs.kind import JobLink, JobParams, registered
from app.tables import Job, JobStatus

# Modules of the package that hold no kind.
_NOT_KINDS = {"queue", "kind", "kinds", "probe_fit", "judge_protocol", "judge_sampling",
              "judge_results", "answer_results", "metrics_view", "timing", "prompt_template",
              "critic_protocol", "critic_results", "judge_context", "rejudge_plan"}  # fmt: skip

for _module in pkgutil.iter_modules(package.__path__):
    if _module.name not in _NOT_KINDS:
        import_module(f"{package.__name__}.{_module.name}")


def all_kinds() -> dict[str, type[JobParams]]:
    """Kind name -> its parameters class, for every kind."""
    return registered()


def startable_kinds() -> dict[str, type[JobParams]]:
    """The kinds users start (forms, the API); the app queues the others itself."""
    return {name: cls for name, cls in registered().items() if cls.startable}


def params_of(job: Job) -> JobParams | None:
    """The typed parameters of a job row; None for an unknown kind or parameters it refuses."""
    cls = registered().get(job.kind)
    if cls is None:
        return None
    try:
        return cls.from_dict(job.params or {})
    except (AppellateError, TypeError, ValueError, KeyError):
        # A row written by an older version still gets its page, without the parsed view.
        return None


def describe_job(job: Job) -> str:
    """What the job does, in words (its kind's name when the parameters cannot be read)."""
    params = params_of(job)
    return params.describe() if params is not None else job.kind.replace("_", " ")


def job_links(job: Job) -> list[JobLink]:
    """The pages showing what a finished (``done``) job produced; none for any other job."""
    params = params_of(job)
    if job.status != JobStatus.done.value or params is None:
        return []
    return params.links(job.result or {})
