"""Choice-answering bookkeeping in the store: which items remain, and idempotent prediction writes.

Items with a prediction of the run's detector are done, so a resumed job re-plans from the
prediction table and never writes a prediction twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import bump_data_version
from app.services.evidence.model_runs import run_items
from app.services.jobs.answer import ChoiceParams
from app.sql.bulk import bulk_insert, one_of
from app.tables import Benchmark, Prediction, utcnow


@dataclass(frozen=True)
class ChoiceItem:
    """One item to answer: its id, option count and the rendered user message."""

    instance_id: int
    n_options: int
    message: str


@dataclass(frozen=True)
class ChoicePlan:
    """The items still to answer, how many there are in all, and the detector's id."""

    benchmark_id: int
    detector_id: int
    pending: list[ChoiceItem]
    total: int


@dataclass(frozen=True)
class ChoiceAnswer:
    """A model's answer to one item: the chosen letter and a probability per option."""

    instance_id: int
    answer: str
    probabilities: dict[str, float]
    details: dict[str, Any]


def plan_choices(
    session: Session, params: ChoiceParams, detector_details: dict[str, Any]
) -> ChoicePlan:
    """The items of a run and which have no prediction yet (creates the detector).

    Raises
    ------
    InvalidInput
        If an item lacks a question or a list of options.

    """
    run = run_items(session, params, detector_details)
    items: list[ChoiceItem] = []
    for instance_id, external_id, payload in run.rows:
        options = payload.get("options")
        if not isinstance(payload.get("question"), str) or not isinstance(options, list):
            raise InvalidInput(
                f"item {external_id!r} lacks a question or a list of options", field="payload"
            )
        items.append(ChoiceItem(instance_id, len(options), params.user_message(payload)))
    done = set(
        session.scalars(
            select(Prediction.instance_id).where(
                Prediction.detector_id == run.detector_id,
                one_of(session, Prediction.instance_id, [i.instance_id for i in items]),
            )
        )
    )
    pending = [i for i in items if i.instance_id not in done]
    return ChoicePlan(run.benchmark_id, run.detector_id, pending, len(items))


def write_answers(session: Session, plan: ChoicePlan, answers: Sequence[ChoiceAnswer]) -> int:
    """Insert one batch of predictions, skipping items answered meanwhile; returns rows added."""
    ids = [a.instance_id for a in answers]
    existing = set(
        session.scalars(
            select(Prediction.instance_id).where(
                Prediction.detector_id == plan.detector_id,
                one_of(session, Prediction.instance_id, ids),
            )
        )
    )
    rows = [
        (plan.detector_id, a.instance_id, a.answer, a.probabilities, a.details)
        for a in answers
        if a.instance_id not in existing
    ]
    if not rows:
        return 0
    columns = ("detector_id", "instance_id", "answer", "probabilities", "details")
    added = bulk_insert(session, Prediction.__table__, columns, rows, {"created_at": utcnow()})
    bench = session.get_one(Benchmark, plan.benchmark_id)
    bump_data_version(session, bench)
    return added
