"""The ``probe_card`` job kind: a probe recipe fitted and run through the stress-test battery.

The worker builds the recipe's training set, captures and fits it, builds the five stress tests
on policy with the same model (:mod:`app.ingest.lie.stress`), scores them and stores the card
(per condition and confounder AUROC with intervals, per-persona macro AUROC, TPR at the control
threshold, trivial-predictor warnings, set verification and rejections) as the job's result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.language_models import get_language_model
from app.services.evidence.lie_recipes import get_recipe
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.tables import Job, JobStatus

MAX_SIZE = 2000


@job_kind
@dataclass(frozen=True)
class ProbeCardParams(JobParams):
    """Recipe, model, set size (training rows per source, stress questions, control replies).

    ``personas`` limits the persona set (default all 15); ``base_url``/``remote_model`` send
    the persona-set generation to an OpenAI-compatible server; ``resamples`` sizes the bootstrap.
    """

    kind = "probe_card"
    title = "Run a probe recipe's report card"

    recipe: str
    model: str
    size: int = 8
    seed: int = 0
    personas: list[str] = field(default_factory=list)
    base_url: str | None = None
    remote_model: str | None = None
    resamples: int = 500
    batch_size: int = 8

    def validate(self) -> None:
        """A known recipe, sizes in range, a remote model named with a server."""
        get_recipe(self.recipe)
        if not 1 <= self.size <= MAX_SIZE:
            raise InvalidInput(f"must be 1 to {MAX_SIZE}", field="size")
        if self.resamples < 0 or self.batch_size < 1:
            raise InvalidInput("must be positive", field="resamples")
        if bool(self.base_url) != bool(self.remote_model):
            raise InvalidInput("give the server and its model name together", field="base_url")

    def check(self, session: Session) -> None:
        """The model is registered."""
        get_language_model(session, self.model)

    def describe(self) -> str:
        """E.g. "Report card of the recipe paper with smollm2 (size 8)"."""
        return f"Report card of the recipe {self.recipe} with {self.model} (size {self.size})"

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The probes page, where the report cards are shown side by side."""
        return [JobLink("Report cards (probes page)", "probes")]


@dataclass(frozen=True)
class CardTable:
    """Finished report cards side by side: one column per card, one row per stress-test slice.

    ``cells[slice][k]`` is the row of card ``k`` for that slice (None when it has none).
    """

    cards: list[dict[str, Any]]
    slices: list[str]
    cells: dict[str, list[dict[str, Any] | None]]


def report_cards(session: Session, limit: int = 12) -> CardTable:
    """The newest finished card per (recipe, model, size), newest first, as one table."""
    jobs = session.scalars(
        select(Job)
        .where(Job.kind == ProbeCardParams.kind, Job.status == JobStatus.done.value)
        .order_by(Job.id.desc())
    )
    cards: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for job in jobs:
        card = job.result or {}
        key = (card.get("recipe"), card.get("model"), card.get("size"))
        if "rows" not in card or key in seen:
            continue
        seen.add(key)
        cards.append({**card, "job": job.id})
        if len(cards) == limit:
            break
    slices = list(dict.fromkeys(r["slice"] for c in cards for r in c["rows"]))
    cells = {
        name: [next((r for r in c["rows"] if r["slice"] == name), None) for c in cards]
        for name in slices
    }
    return CardTable(cards, slices, cells)
