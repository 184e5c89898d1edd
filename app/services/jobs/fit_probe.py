"""The ``fit_probe`` job kind: a judge's flip probe, its baselines and a frozen copy for transfer.

Nested grouped cross-validation on the activations the judge job captured before each AB
verdict; the baselines are fitted on the same folds. With ``shared`` judges the fit runs on their
analysis set (the pairs every one of them judged validly in both orders) and its shared outer
folds (:mod:`app.services.metrics.judge_analysis`), so the probes of those judges are compared
on the same pairs and folds; a judge whose flips make the probe not estimable is refused when
the job is asked for, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.flips import flip_label_name
from app.services.evidence.labelled_items import get_detector
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.jobs.probe_fit import check_cv, default_lambdas
from app.services.metrics.judge_analysis import AnalysisSet, SharedFolds, analysis_set, shared_folds


@job_kind
@dataclass(frozen=True)
class FitFlipParams(JobParams):
    """A judge's flip probe on a benchmark (activations from ``appellate judge``).

    ``activation_set`` defaults to the judge's own capture, ``judge:<judge>:<benchmark>``.
    ``shared`` names the other judges whose analysis set and outer folds the fit uses (the
    judge itself may be among them); empty: the judge's own retained pairs and folds.
    ``slice_field`` stratifies the shared folds by that payload field.
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
    shared: list[str] = field(default_factory=list)
    slice_field: str | None = None

    def validate(self) -> None:
        """Fold counts, seed and grid in range."""
        check_cv(self.outer, self.inner, self.seed, self.lambdas)

    @property
    def judges(self) -> list[str]:
        """The judges of the analysis set: the judge, then the other shared ones, once each."""
        return list(dict.fromkeys([self.judge, *self.shared]))

    def shared_plan(self, session: Session) -> tuple[AnalysisSet, SharedFolds]:
        """The analysis set of :attr:`judges` and its shared folds (same for each of them).

        Raises
        ------
        InvalidInput
            The gate's reason when this judge's probe is not estimable on them.

        """
        aset = analysis_set(session, self.benchmark, self.judges, slice_field=self.slice_field)
        folds = shared_folds(aset, self.outer, self.seed)
        reason = folds.refusals[self.judge]
        if reason is not None:
            raise InvalidInput(f"no probe of {self.judge}: {reason}", field="judge")
        return aset, folds

    def check(self, session: Session) -> None:
        """The benchmark and the judge exist; with shared judges, the probe is estimable."""
        get_benchmark(session, self.benchmark)
        get_detector(session, self.judge)
        if self.shared:
            self.shared_plan(session)

    def describe(self) -> str:
        """E.g. "Fit the flip probe of smollm2/forced on jb (5 x 3 grouped folds, seed 0)"."""
        shared = f", folds shared with {', '.join(self.judges[1:])}" if self.shared else ""
        return (
            f"Fit the flip probe of {self.judge} on {self.benchmark} "
            f"({self.outer} x {self.inner} grouped folds, seed {self.seed}{shared})"
        )

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The probes page, and the probe beside the baselines on the flip labels' metrics."""
        flips = (("label", flip_label_name(self.judge)),)
        return [
            JobLink("The probes page", "probes"),
            JobLink("Metrics of its flip labels", "metrics", self.benchmark, query=flips),
        ]
