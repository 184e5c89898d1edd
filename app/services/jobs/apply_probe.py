"""The ``apply_probe`` job kind: a frozen probe scores another benchmark, with no refitting.

The probe keeps its standardisation, layer and coefficients; its activations on the target
are the judge's capture (flip probes) or captured now with the probe's own spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labelled_items import get_detector
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.table.instance_filter import InstanceFilter


@job_kind
@dataclass(frozen=True)
class ApplyParams(JobParams):
    """Score ``benchmark`` with the frozen probe ``probe``; no fitting, no recalibration.

    ``fields`` overrides the payload fields of the probe's capture spec (``text_field``).
    """

    kind = "apply_probe"
    title = "Apply a frozen probe"

    probe: str
    benchmark: str
    activation_set: str | None = None
    fields: dict[str, str] = field(default_factory=dict)

    def check(self, session: Session) -> None:
        """The benchmark exists, and the probe is a frozen one (it has a stored artifact)."""
        get_benchmark(session, self.benchmark)
        probe = get_detector(session, self.probe)
        if not (probe.details or {}).get("artifact"):
            raise InvalidInput(f"{self.probe!r} is not a frozen probe", field="probe")

    def describe(self) -> str:
        """E.g. "Score mt-bench with the frozen probe probe:smollm2/forced"."""
        return f"Score {self.benchmark} with the frozen probe {self.probe}"

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The probes page, the probe's scores in the table and the target's metrics."""
        scored = InstanceFilter(score_detector=self.probe, score_min=0.0)
        return [
            JobLink("The probes page", "probes"),
            JobLink(f"{self.probe}'s scores (instance table)", "table", self.benchmark, scored),
            JobLink(f"Metrics of {self.benchmark}", "metrics", self.benchmark),
        ]
