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
from app.sql.lookup import get_one
from app.tables import ActivationSet, Detector, Job, JobStatus

MAX_SIZE = 2000


@job_kind
@dataclass(frozen=True)
class ProbeCardParams(JobParams):
    """Recipe or fitted probe, model, size (training rows per source, stress questions, controls).

    Exactly one of ``recipe`` (fitted here) and ``probe`` (a lie probe already fitted with
    ``probe fit-lie``, read as it was fitted) is given. ``personas`` limits the persona set
    (default all 15); ``base_url``/``remote_model`` send the persona-set generation to an
    OpenAI-compatible server; ``resamples`` sizes the bootstrap.
    """

    kind = "probe_card"
    title = "Run a probe recipe's report card"

    model: str
    recipe: str = ""
    probe: str = ""
    size: int = 8
    seed: int = 0
    personas: list[str] = field(default_factory=list)
    base_url: str | None = None
    remote_model: str | None = None
    resamples: int = 500
    batch_size: int = 8

    def validate(self) -> None:
        """A known recipe or a probe (one of them), sizes in range, a server with its model."""
        if bool(self.recipe) == bool(self.probe):
            raise InvalidInput("choose a recipe or a fitted probe (one of them)", field="recipe")
        if self.recipe:
            get_recipe(self.recipe)
        if not 1 <= self.size <= MAX_SIZE:
            raise InvalidInput(f"must be 1 to {MAX_SIZE}", field="size")
        if self.resamples < 0 or self.batch_size < 1:
            raise InvalidInput("must be positive", field="resamples")
        if bool(self.base_url) != bool(self.remote_model):
            raise InvalidInput("give the server and its model name together", field="base_url")

    def check(self, session: Session) -> None:
        """The model is registered; a probe is a fitted lie probe the card can read items for."""
        model = get_language_model(session, self.model)
        if self.probe:
            details = fitted_lie_probe(session, self.probe)
            # The weights it was fitted on: those of the activations it was fitted from.
            fingerprint = session.scalar(
                select(ActivationSet.model_fingerprint).where(
                    ActivationSet.name == details.get("activation_set")
                )
            )
            if fingerprint is not None and fingerprint != model.fingerprint:
                raise InvalidInput(
                    f"probe {self.probe!r} was fitted on other weights than model {self.model!r}'s",
                    field="model",
                )

    def describe(self) -> str:
        """E.g. "Report card of the recipe paper with smollm2 (size 8)"."""
        what = f"the recipe {self.recipe}" if self.recipe else f"the probe {self.probe}"
        return f"Report card of {what} with {self.model} (size {self.size})"

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The probes page, where the report cards are shown side by side."""
        return [JobLink("Report cards (probes page)", "probes")]


# How a fitted lie probe read its items (its extraction spec) -> how the card captures them.
_READINGS: dict[tuple[str, str], tuple[str, str]] = {
    ("text", "last"): ("text", "statement_end"),
    ("chat", "end_of_turn"): ("chat", "end_of_turn"),
}
# The payload fields the stress items hold, per format.
_FIELDS = {
    "chat": {"system_field": "system", "user_field": "question", "assistant_field": "response"},
    "text": {"text_field": "statement"},
}


def probe_reading(extract: Mapping[str, Any]) -> tuple[str, str]:
    """(render, position) of the card's capture for a probe fitted with ``extract``.

    The card renders each stress item as the stress sets hold it (system, question, response;
    or the bare text): a probe that read other fields or another token cannot be carded.

    Raises
    ------
    InvalidInput
        For a reading the card cannot reproduce.

    """
    key = (str(extract.get("format")), str(extract.get("position")))
    reading = _READINGS.get(key)
    wanted = _FIELDS.get(key[0], {})
    fields_match = all(extract.get(k) == v for k, v in wanted.items())
    if reading is None or not fields_match:
        raise InvalidInput(
            "a report card reads a probe fitted on bare statements (last token) or on "
            "system/question/response chats (end of turn, as probe fit-lie fits them); this one "
            f"reads {key[0]} items at {key[1]} from "
            + ", ".join(f"{k}={extract.get(k)!r}" for k in sorted(extract) if k.endswith("_field")),
            field="probe",
        )
    return reading


def fitted_lie_probe(session: Session, name: str) -> dict[str, Any]:
    """The detector details of the fitted lie probe ``name``, checked for a card.

    Raises
    ------
    NotFound
        For no probe of that name.
    InvalidInput
        For a probe that is not a frozen lie probe, or one read in a way a card cannot repeat.

    """
    detector = get_one(session, Detector, f"no probe named {name!r}", name=name, kind="probe")
    details = dict(detector.details or {})
    if details.get("kind") != "lie" or not details.get("artifact"):
        raise InvalidInput(
            f"probe {name!r} is not a frozen lie probe (fit one with probe fit-lie)",
            field="probe",
        )
    probe_reading(details.get("extract") or {})
    return details


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
