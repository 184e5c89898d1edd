"""The ``answer_choices`` job kind: a local model answers a choice benchmark's items.

Its option-letter probabilities become predictions (and, optionally, activations).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.language_models import get_language_model
from app.services.evidence.model_runs import RunDetector
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.jobs.prompt_template import check_template, option_lines, subject_of
from app.tables import BenchmarkKind

DEFAULT_TEMPLATE = (
    "The following is a multiple choice question{about}. Reply with the letter of the "
    "correct option.\n\n{question}\n\n{options}"
)
# The assistant's reply starts here; the next token is the option letter.
ANSWER_PREFIX = "Answer:"
_PLACEHOLDERS = {"about", "question", "options", "subject"}


@job_kind
@dataclass(frozen=True)
class ChoiceParams(JobParams):
    """What to answer, with which registered model and how.

    ``template`` is the user message, with ``{question}``, ``{options}`` (one ``A. text`` line
    per option), ``{subject}`` and ``{about}`` (`` about <subject>`` or nothing) placeholders;
    the reply is prefilled with ``Answer:`` and the option letters' next-token log-probabilities
    give the answer. ``detector`` defaults to ``<model>/choice``; ``limit`` takes the first
    items by id.
    """

    benchmark: str
    model: str
    detector: str = ""
    template: str = DEFAULT_TEMPLATE
    batch_size: int = 8
    limit: int | None = None
    capture: bool = True

    kind = "answer_choices"
    title = "Answer"

    def validate(self) -> None:
        """Counts in range; the template has {question} and {options} and no other name."""
        if self.batch_size < 1:
            raise InvalidInput("must be at least 1", field="batch_size")
        if self.limit is not None and self.limit < 1:
            raise InvalidInput("must be at least 1", field="limit")
        check_template(self.template, ("question", "options"), _PLACEHOLDERS)
        if not self.detector:
            self._set("detector", f"{self.model}/choice")

    def check(self, session: Session) -> None:
        """A choice benchmark, and a registered model."""
        bench = get_benchmark(session, self.benchmark)
        if bench.kind != BenchmarkKind.choice:
            raise InvalidInput(
                f"benchmark {bench.name!r} holds {bench.kind} items, not choice items",
                field="benchmark",
            )
        get_language_model(session, self.model)

    def describe(self) -> str:
        """E.g. "Answer mmlu with smollm2 as smollm2/choice, the first 50 items"."""
        items = f"the first {self.limit} items" if self.limit else "every item"
        return f"Answer {self.benchmark} with {self.model} as {self.detector}, {items}"

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The metrics with the new model's accuracy, and the table."""
        return [
            JobLink(f"Metrics of {self.benchmark}", "metrics", self.benchmark),
            JobLink(f"{self.benchmark}: the instance table", "table", self.benchmark),
        ]

    def run_detector(self) -> RunDetector:
        """The detector the run writes its predictions under."""
        return RunDetector(
            self.detector, "model", f"{self.model} answering by option-letter probabilities"
        )

    def user_message(self, payload: dict[str, Any]) -> str:
        """The prompt of one item (its question, lettered options and subject)."""
        subject = subject_of(payload)
        return self.template.format(
            question=payload.get("question", ""),
            options=option_lines(payload.get("options") or []),
            subject=subject,
            about=f" about {subject}" if subject else "",
        )


def activation_set_name(params: ChoiceParams) -> str:
    """Name of the activation set of a choice run: the state before the answer letter."""
    return f"choice:{params.detector}:{params.benchmark}"
