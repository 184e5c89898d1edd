"""The ``fit_set_probe`` job kind: a probe of any binary label set on any activation set.

Nested cross-validation grouped by the items' groups; the out-of-fold scores are stored as
the detector ``probe:<activation set>:<label>`` of the benchmark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.activation_sets import get_activation_set
from app.services.evidence.benchmarks import get_benchmark
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.jobs.probe_fit import check_cv, default_lambdas


@job_kind
@dataclass(frozen=True)
class FitSetParams(JobParams):
    """A probe of ``label`` on the activations of ``activation_set`` (items of ``benchmark``)."""

    kind = "fit_set_probe"
    title = "Fit a probe on an activation set"

    benchmark: str
    activation_set: str
    label: str
    outer: int = 5
    inner: int = 3
    seed: int = 0
    lambdas: list[float] = field(default_factory=default_lambdas)

    @property
    def probe_name(self) -> str:
        """The detector that holds the probe's out-of-fold scores."""
        return f"probe:{self.activation_set}:{self.label}"

    def validate(self) -> None:
        """A label set named; fold counts, seed and grid in range."""
        if not self.label:
            raise InvalidInput("names a binary label set", field="label")
        check_cv(self.outer, self.inner, self.seed, self.lambdas)

    def check(self, session: Session) -> None:
        """The benchmark and the activation set exist."""
        get_benchmark(session, self.benchmark)
        get_activation_set(session, self.activation_set)

    def describe(self) -> str:
        """E.g. "Fit a probe of defect on choice:smollm2/choice:mmlu (mmlu, 5 x 3 folds)"."""
        return (
            f"Fit a probe of {self.label} on {self.activation_set} ({self.benchmark}, "
            f"{self.outer} x {self.inner} grouped folds, seed {self.seed})"
        )

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The probes page, and the probe on the metric matrix of its label set."""
        label = (("label", self.label),)
        return [
            JobLink("The probes page", "probes"),
            JobLink(f"Metrics of {self.label}", "metrics", self.benchmark, query=label),
        ]
