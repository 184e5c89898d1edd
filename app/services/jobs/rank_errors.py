"""The ``rank_errors`` job kind: every label-error ranker of a choice or answer benchmark.

The rankers (:mod:`app.services.metrics.rankers`) are stored as ``ranker:*`` score detectors,
so the metric matrix measures them against expert verdicts like any other detector.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.metrics.rankers import DEFAULT_TRAIN_LABEL, RANKERS, frozen_combiner


@job_kind
@dataclass(frozen=True)
class RankErrorsParams(JobParams):
    """Which benchmark, which rankers (none: every one that applies), and the training verdicts.

    ``train_label`` names the 0/1 expert verdicts (1 = wrong label) the combiner learns from,
    besides the resolved outcomes of review; ``apply_from`` names a benchmark whose frozen
    combiner scores this one instead (nothing is fitted).
    """

    kind = "rank_errors"
    title = "Rank label errors"

    benchmark: str
    rankers: list[str] = field(default_factory=list)
    train_label: str = DEFAULT_TRAIN_LABEL
    apply_from: str | None = None

    def validate(self) -> None:
        """Known ranker names, each once; a training label set named."""
        unknown = [n for n in self.rankers if n not in RANKERS]
        if unknown:
            raise InvalidInput(
                f"unknown ranker(s) {unknown}; choose from {list(RANKERS)}", field="rankers"
            )
        self._set("rankers", list(dict.fromkeys(self.rankers)))
        if not self.train_label:
            raise InvalidInput("names the label set of expert verdicts", field="train_label")

    def check(self, session: Session) -> None:
        """A benchmark whose kind some ranker ranks; ``apply_from`` with a frozen combiner."""
        bench = get_benchmark(session, self.benchmark)
        if self.apply_from:
            frozen_combiner(session, self.apply_from)
        kinds = {kind for r in RANKERS.values() for kind in r.kinds}
        if bench.kind not in kinds:
            raise InvalidInput(
                f"benchmark {bench.name!r} holds {bench.kind} items; rankers need model answers "
                "on choice or answer items",
                field="benchmark",
            )

    def describe(self) -> str:
        """E.g. "Rank label errors of mmlu-redux (every ranker; combiner trained on defect)"."""
        which = ", ".join(self.rankers) if self.rankers else "every ranker"
        if self.apply_from:
            return (
                f"Rank label errors of {self.benchmark} ({which}; the combiner frozen on "
                f"{self.apply_from})"
            )
        return f"Rank label errors of {self.benchmark} ({which}; trained on {self.train_label})"

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The rankers measured against the verdicts (when there were any), and the table."""
        measured = any(
            (quality or {}).get("auroc") is not None
            for quality in (result.get("rankers") or {}).values()
        )
        table = JobLink(f"{self.benchmark}: the instance table", "table", self.benchmark)
        if not measured:
            # No verdicts to measure them against: the rankers' scores are in the table.
            return [JobLink(f"Metrics of {self.benchmark}", "metrics", self.benchmark), table]
        verdicts = (("label", self.train_label),)
        against = f"Rankers against {self.train_label}"
        return [JobLink(against, "metrics", self.benchmark, query=verdicts), table]
