"""The ``extract`` job kind: residual activations of a benchmark's instances at a position rule.

Transcripts come from payload fields, as plain text (a statement's last token, no chat
template) or as a chat (system, user, assistant turns rendered by the model's template); the
capture itself runs in :mod:`workers.jobs.extract`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.language_models import get_language_model
from app.services.jobs.kind import JobLink, JobParams, job_kind

FORMATS = ("text", "chat")
POSITIONS = ("last", "end_of_turn", "before_marker")


@job_kind
@dataclass(frozen=True)
class ExtractParams(JobParams):
    """What to capture: payload fields, format, position rule, layers, batch size, item limit.

    ``position`` is ``last``, ``end_of_turn`` or ``before_marker:<text>``; ``layers`` None means
    the judge layers.
    """

    kind = "extract"
    title = "Capture activations"

    benchmark: str
    model: str
    name: str = ""
    format: str = "chat"
    text_field: str = "statement"
    system_field: str | None = None
    user_field: str = "question"
    assistant_field: str = "response"
    position: str = "end_of_turn"
    layers: list[int] | None = None
    batch_size: int = 8
    limit: int | None = None

    def validate(self) -> None:
        """A known format and position rule, counts in range; the set's default name."""
        if self.format not in FORMATS:
            raise InvalidInput(f"must be one of {', '.join(FORMATS)}", field="format")
        if self.position.partition(":")[0] not in POSITIONS:
            raise InvalidInput(
                "must be last, end_of_turn or before_marker:<text>", field="position"
            )
        if self.batch_size < 1:
            raise InvalidInput("must be at least 1", field="batch_size")
        if self.limit is not None and self.limit < 1:
            raise InvalidInput("must be at least 1", field="limit")
        if self.layers is not None and any(layer < 0 for layer in self.layers):
            raise InvalidInput("layer numbers start at 0", field="layers")
        if not self.name:
            self._set(
                "name", f"extract:{self.model}:{self.benchmark}:{self.format}:{self.position}"
            )

    def check(self, session: Session) -> None:
        """The benchmark and the model exist."""
        get_benchmark(session, self.benchmark)
        get_language_model(session, self.model)

    def describe(self) -> str:
        """E.g. "Capture smollm2's activations of truth (text, at the last token)"."""
        items = f", the first {self.limit} items" if self.limit else ""
        return (
            f"Capture {self.model}'s activations of {self.benchmark} "
            f"({self.format}, at {self.position}){items} as {self.name}"
        )

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The probes page (to fit a probe on the set) and the benchmark's table."""
        return [
            JobLink("Fit a probe on its activations (probes page)", "probes"),
            JobLink(f"{self.benchmark}: the instance table", "table", self.benchmark),
        ]
