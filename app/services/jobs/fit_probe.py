"""The ``fit_probe`` job kind: a judge's flip probe, its baselines and a frozen copy for transfer.

Nested grouped cross-validation on the activations the judge job captured before each AB
verdict; the baselines are fitted on the same folds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.flips import flip_label_name
from app.services.evidence.labelled_items import get_detector
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.jobs.probe_fit import check_cv, default_lambdas


@job_kind
@dataclass(frozen=True)
class FitFlipParams(JobParams):
    """A judge's flip probe on a benchmark (activations from ``appellate judge``).

    ``activation_set`` defaults to the judge's own capture, ``judge:<judge>:<benchmark>``.
    """

    kind = "fit_probe"
    title = "Fit a flip probe"

    benchmark: str
    judge: str
    activation_set: str | None = None
    outer: int = 5
    inner: int = 3
    seed: int = 0
    lambdas: list[float] = field(default_factory=default_lambdas)

    def validate(self) -> None:
        """Fold counts, seed and grid in range."""
        check_cv(self.outer, self.inner, self.seed, self.lambdas)

    def check(self, session: Session) -> None:
        """The benchmark and the judge exist."""
        get_benchmark(session, self.benchmark)
        get_detector(session, self.judge)

    def describe(self) -> str:
        """E.g. "Fit the flip probe of smollm2/forced on jb (5 x 3 grouped folds, seed 0)"."""
        return (
            f"Fit the flip probe of {self.judge} on {self.benchmark} "
            f"({self.outer} x {self.inner} grouped folds, seed {self.seed})"
        )

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The probes page, and the probe beside the baselines on the flip labels' metrics."""
        flips = (("label", flip_label_name(self.judge)),)
        return [
            JobLink("The probes page", "probes"),
            JobLink("Metrics of its flip labels", "metrics", self.benchmark, query=flips),
        ]
