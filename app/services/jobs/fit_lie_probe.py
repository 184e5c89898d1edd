"""The ``fit_lie_probe`` job kind: a lie-detector probe on a labelled statement or chat benchmark.

The activations are captured first when missing (``extract``: an :class:`ExtractParams` spec
without its benchmark); the layer is the earliest with the best validation AUROC, and the
frozen probe applies the same spec to any benchmark it scores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.language_models import get_language_model
from app.services.jobs.extract import ExtractParams
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.jobs.probe_fit import check_cv, default_lambdas

# The probe is stored as a detector of this name (a 200-character column).
MAX_NAME = 200


@job_kind
@dataclass(frozen=True)
class FitLieParams(JobParams):
    """A lie-detector probe: activations of a statement/chat benchmark, layer by validation AUROC.

    ``extract`` holds :class:`ExtractParams` fields (model, format, position, fields, layers);
    ``val_fraction`` and ``test_fraction`` are the shares of items (whole groups) in the split
    that picks the layer and in the one that reports the curve.
    """

    kind = "fit_lie_probe"
    title = "Fit a lie-detector probe"

    benchmark: str
    name: str
    extract: dict[str, Any]
    label: str = "truth"
    val_fraction: float = 0.2
    test_fraction: float = 0.2
    folds: int = 5
    seed: int = 0
    lambdas: list[float] = field(default_factory=default_lambdas)

    def validate(self) -> None:
        """A probe name, a valid capture spec, split shares and folds in range."""
        if not self.name.strip() or len(self.name) > MAX_NAME:
            raise InvalidInput(f"names the probe in 1 to {MAX_NAME} characters", field="name")
        self.extract_params()
        shares = (self.val_fraction, self.test_fraction)
        if not all(0 < s < 1 for s in shares) or sum(shares) >= 1:
            raise InvalidInput(
                "validation and test shares are each in (0, 1) and leave items to train on",
                field="val_fraction",
            )
        check_cv(self.folds, 2, self.seed, self.lambdas)

    def extract_params(self, name: str = "") -> ExtractParams:
        """The capture of the training benchmark (``InvalidInput`` naming ``extract``)."""
        if "benchmark" in self.extract or "model" not in self.extract:
            raise InvalidInput("a capture spec with its model and no benchmark", field="extract")
        return ExtractParams.from_dict({**self.extract, "benchmark": self.benchmark, "name": name})

    def check(self, session: Session) -> None:
        """The benchmark and the model exist."""
        get_benchmark(session, self.benchmark)
        get_language_model(session, self.extract["model"])

    def describe(self) -> str:
        """E.g. "Fit the lie probe "lie-1" on truth with smollm2, label truth"."""
        return (
            f'Fit the lie-detector probe "{self.name}" on {self.benchmark} with '
            f"{self.extract['model']} ({self.extract.get('position', 'end_of_turn')}), "
            f"label {self.label}"
        )

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The probes page, and the metrics of its label set on the training benchmark."""
        label = (("label", self.label),)
        return [
            JobLink("The probes page", "probes"),
            JobLink(f"Metrics of {self.label}", "metrics", self.benchmark, query=label),
        ]
