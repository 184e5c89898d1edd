"""Critic bookkeeping in the store: which items remain, idempotent score writes, retention.

An item with a score of the critic's detector is done, so a resumed job re-plans from the score
table and never writes a score twice. Items whose output had no valid verdict get no score (a
score is never guessed); they are counted in the job's result and asked again by a rerun.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.answer_matrix import ANSWER_LABEL
from app.services.evidence.benchmarks import bump_data_version
from app.services.evidence.labels import current_labels
from app.services.evidence.model_runs import run_items
from app.services.jobs.critic import CriticParams
from app.services.jobs.critic_protocol import OK_VERDICT, defect_probability
from app.services.jobs.judge_sampling import sample_pairs
from app.sql.bulk import bulk_insert, one_of
from app.tables import Benchmark, Score, utcnow

# Raw outputs kept per invalid item in the job's result (the first few, shortened).
INVALID_EXAMPLES = 3
EXAMPLE_CHARS = 300


@dataclass(frozen=True)
class CriticItem:
    """One item to check: its ids, its labelled answer and the chat that asks the critic."""

    instance_id: int
    external_id: str
    key: str
    messages: list[dict[str, str]]


@dataclass(frozen=True)
class CriticPlan:
    """The run's items still to check, every labelled item of the run, and the detector's id.

    ``unlabelled`` counts the run's items with no labelled answer (nothing to check).
    """

    benchmark_id: int
    detector_id: int
    pending: list[CriticItem]
    item_ids: list[int]
    unlabelled: int


@dataclass(frozen=True)
class CriticVerdict:
    """The critic's reading of one item.

    ``verdict`` is None when the output had no valid verdict (``error`` says why); then there
    is no score. ``probabilities`` are the softmax of the verdict labels' logits (``source``
    ``logits``) or log-probabilities (``logprobs``); None where the server returned none.
    ``missing`` lists the labels a server's top log-probabilities left out (their softmax is
    over the others), and ``max_error`` bounds how far that moves the score (0 when none is).
    """

    instance_id: int
    raw_output: str
    verdict: str | None
    error: str | None
    probabilities: dict[str, float] | None
    source: str | None
    prompt_tokens: int
    output_tokens: int
    missing: tuple[str, ...] = ()
    max_error: float = 0.0

    def score(self) -> float | None:
        """P(defect) from the probabilities; the verdict as 0/1 without them; None if invalid."""
        if self.verdict is None:
            return None
        if self.probabilities is not None:
            return defect_probability(self.probabilities)
        return 0.0 if self.verdict == OK_VERDICT else 1.0


@dataclass
class CriticTally:
    """What the run's batches found: outputs read, invalid ones by reason, a few examples."""

    asked: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    examples: list[dict[str, str]] = field(default_factory=list)

    def add(self, items: Sequence[CriticItem], verdicts: Sequence[CriticVerdict]) -> None:
        """Count one batch."""
        self.asked += len(verdicts)
        for item, v in zip(items, verdicts, strict=True):
            if v.verdict is None:
                self.errors[v.error or "no verdict"] += 1
                if len(self.examples) < INVALID_EXAMPLES:
                    self.examples.append(
                        {"item": item.external_id, "output": v.raw_output[:EXAMPLE_CHARS]}
                    )


def plan_critic(
    session: Session, params: CriticParams, detector_details: dict[str, Any]
) -> CriticPlan:
    """The run's items (creating the detector) and those without a score yet.

    Raises
    ------
    InvalidInput
        If an item lacks a question, or no item of the run has a labelled answer.

    """

    def choose(s: Session, benchmark_id: int, detector_id: int) -> list[int]:
        return sample_pairs(s, benchmark_id, detector_id, params.limit or 0, params.seed)

    run = run_items(session, params, detector_details, choose)
    keys = current_labels(session, [i for i, _, _ in run.rows], [ANSWER_LABEL])
    items: list[CriticItem] = []
    for instance_id, external_id, payload in run.rows:
        if not isinstance(payload.get("question"), str):
            raise InvalidInput(f"item {external_id!r} has no question", field="payload")
        key = keys.get(instance_id, {}).get(ANSWER_LABEL)
        if key is not None:
            items.append(CriticItem(instance_id, external_id, key, params.messages(payload, key)))
    if not items:
        raise InvalidInput(
            f"no item of {params.benchmark!r} has a {ANSWER_LABEL!r} label to check",
            field="benchmark",
        )
    done = _scored(session, run.detector_id, [i.instance_id for i in items])
    pending = [i for i in items if i.instance_id not in done]
    return CriticPlan(
        run.benchmark_id,
        run.detector_id,
        pending,
        [i.instance_id for i in items],
        len(run.rows) - len(items),
    )


def _scored(session: Session, detector_id: int, ids: Sequence[int]) -> set[int]:
    q = select(Score.instance_id).where(
        Score.detector_id == detector_id, one_of(session, Score.instance_id, list(ids))
    )
    return set(session.scalars(q))


def write_verdicts(
    session: Session, plan: CriticPlan, mode: str, verdicts: Sequence[CriticVerdict]
) -> int:
    """Insert the scores of one batch's valid verdicts, skipping items scored meanwhile.

    Returns the rows added.
    """
    existing = _scored(session, plan.detector_id, [v.instance_id for v in verdicts])
    rows = []
    for v in verdicts:
        score = v.score()
        if score is None or v.instance_id in existing:
            continue
        details = {
            "verdict": v.verdict,
            "probabilities": v.probabilities,
            "source": v.source or "verdict",
            "mode": mode,
            "raw_output": v.raw_output,
            "prompt_tokens": v.prompt_tokens,
            "output_tokens": v.output_tokens,
        }
        if v.missing:
            details["missing"] = list(v.missing)
            details["max_error"] = v.max_error
        rows.append((plan.detector_id, v.instance_id, score, details))
    if not rows:
        return 0
    columns = ("detector_id", "instance_id", "score", "details")
    added = bulk_insert(session, Score.__table__, columns, rows, {"created_at": utcnow()})
    bump_data_version(session, session.get_one(Benchmark, plan.benchmark_id))
    return added


def finish_critic(session: Session, plan: CriticPlan, tally: CriticTally) -> dict[str, Any]:
    """The run's retention: items with a score of the critic among the labelled items asked.

    Returns
    -------
    dict
        ``items`` (labelled items of the run), ``scored`` (with a valid verdict, this run and
        earlier ones), ``retention`` (scored / items), ``with_probability`` (scores from the
        verdict tokens' probabilities), ``asked`` (outputs read in this run), ``invalid``
        (by reason, this run), ``invalid_examples`` and ``unlabelled`` (items skipped).

    """
    ids = plan.item_ids
    sources = Counter(
        str((details or {}).get("source"))
        for details in session.scalars(
            select(Score.details).where(
                Score.detector_id == plan.detector_id, one_of(session, Score.instance_id, ids)
            )
        )
    )
    scored = sum(sources.values())
    return {
        "items": len(ids),
        "scored": scored,
        "retention": scored / len(ids),
        "with_probability": scored - sources.get("verdict", 0),
        "asked": tally.asked,
        "invalid": dict(sorted(tally.errors.items())),
        "invalid_examples": tally.examples,
        "unlabelled": plan.unlabelled,
    }
