"""The ``rejudge`` job kind: re-judge in the other order only the pairs a flip ranker flags.

For a judge that judged pairs in one order (a run asked for one order, or imported judgments),
the frozen flip probe (or another ranker: the baseline's scores, or a random order) ranks the
pairs judged in one order only; the top ``budget`` are judged in the order they lack, with the
judge's own model, mode and prompt, and their flips are derived as for any two-order judge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.flips import flip_label_name
from app.services.evidence.labelled_items import get_detector
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.jobs.rejudge_plan import RANDOM, frozen_flip_probes, judge_settings
from app.services.table.instance_filter import FlipState, InstanceFilter
from app.tables import BenchmarkKind


@job_kind
@dataclass(frozen=True)
class RejudgeParams(JobParams):
    """Re-judge in the other order the ``budget`` one-order pairs that ``ranker`` ranks first.

    ``ranker`` is a frozen flip probe (applied to the judge's AB capture first), any detector
    with scores on the pairs (a baseline), or ``random``; empty means the judge's frozen flip
    probe. ``model`` and ``base_url`` name the model for a judge whose judgments were imported.
    """

    kind = "rejudge"
    title = "Re-judge the flagged pairs in the other order"

    benchmark: str
    judge: str
    budget: int
    ranker: str = ""
    seed: int = 0
    model: str = ""
    base_url: str | None = None
    batch_size: int = 4

    def validate(self) -> None:
        """Budget, seed and batch size in range."""
        for ok, name, reason in (
            (self.budget >= 1, "budget", "must be at least 1 pair"),
            (self.seed >= 0, "seed", "must be 0 or more"),
            (self.batch_size >= 1, "batch_size", "must be at least 1"),
        ):
            if not ok:
                raise InvalidInput(reason, field=name)

    def resolved_ranker(self, session: Session) -> str:
        """The ranker's name: as given, or the judge's one frozen flip probe.

        Raises
        ------
        InvalidInput
            If no ranker is given and the judge has no frozen flip probe, or several.

        """
        if self.ranker:
            if self.ranker != RANDOM:
                get_detector(session, self.ranker)
            return self.ranker
        probes = frozen_flip_probes(session, self.judge)
        if len(probes) == 1:
            return probes[0]
        if not probes:
            reason = (
                f"judge {self.judge!r} has no frozen flip probe: fit one where it judged both "
                f"orders (appellate probe fit BENCH --judge {self.judge}), or name a ranker "
                "(a baseline, or random)"
            )
        else:
            reason = f"judge {self.judge!r} has several frozen flip probes: name one of {probes}"
        raise InvalidInput(reason, field="ranker")

    def check(self, session: Session) -> None:
        """A pairwise benchmark, a known judge with a known model, a ranker to use."""
        bench = get_benchmark(session, self.benchmark)
        if bench.kind != BenchmarkKind.pairwise:
            raise InvalidInput(f"benchmark {bench.name!r} holds no pairs", field="benchmark")
        get_detector(session, self.judge)
        judge_settings(session, self.judge, self.model, self.base_url)
        self.resolved_ranker(session)

    def describe(self) -> str:
        """E.g. "Re-judge 10 pairs of jb flagged by probe:j@src in their other order as j"."""
        by = self.ranker or "the judge's frozen flip probe"
        return (
            f"Re-judge in the other order the {self.budget} pairs of {self.benchmark} judged "
            f"once by {self.judge} that {by} ranks first"
        )

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The judge's flipped pairs and the metrics of its flip labels."""
        flips = (("label", flip_label_name(self.judge)),)
        return [
            JobLink(
                "The judge's flipped pairs",
                "table",
                self.benchmark,
                table=InstanceFilter(judge=self.judge, flip=FlipState.yes),
            ),
            JobLink(
                f"Metrics of {flip_label_name(self.judge)}", "metrics", self.benchmark, query=flips
            ),
        ]
