"""Which pairs a re-judging job judges in their other order: the top ``budget`` of a ranker.

The remaining pairs are those the judge judged validly in exactly one of AB and BA. A ranker
orders them (a flip probe's or baseline's scores, or a seeded random order); the first
``budget`` are re-judged in the order they lack. Judgments the job itself wrote carry its id,
so a resumed job sees the same remaining pairs, the same order and the same choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.flips import flip_value
from app.services.evidence.labelled_items import get_detector
from app.services.jobs.judge_protocol import DEFAULT_SYSTEM, DEFAULT_TEMPLATE
from app.services.jobs.judge_sampling import seeded_rank
from app.tables import Choice, Detector, Instance, Judgment, Order, Score

__all__ = [
    "RANDOM",
    "REJUDGE_KEY",
    "Selection",
    "choose_pairs",
    "flips_among",
    "frozen_flip_probes",
    "judge_settings",
]

RANDOM = "random"
# The judgment details key naming the re-judging job that wrote the judgment.
REJUDGE_KEY = "rejudge_job"
_OTHER = {Order.AB.value: Order.BA.value, Order.BA.value: Order.AB.value}


@dataclass(frozen=True)
class Selection:
    """The remaining pairs, how they rank, and the chosen ``(instance id, order)`` units.

    ``ranked`` lists the scored remaining pairs best first as ``(instance id, external id,
    score)``; ``unscored`` counts remaining pairs the ranker has no score for (never chosen).
    """

    remaining: int
    invalid: int
    unscored: int
    ranked: list[tuple[int, str, float]]
    chosen: list[tuple[int, str]]


def frozen_flip_probes(session: Session, judge: str) -> list[str]:
    """Names of the frozen flip probes fitted on ``judge``'s flips, by name."""
    q = select(Detector.name, Detector.details).where(Detector.kind == "probe")
    return sorted(
        name
        for name, details in session.execute(q.order_by(Detector.name))
        if (details or {}).get("kind") == "flip-frozen" and details.get("judge") == judge
    )


def judge_settings(session: Session, judge: str, model: str, base_url: str | None) -> dict:
    """How the judge judged (model, backend, mode, prompt), from its detector's details.

    ``model`` / ``base_url`` name the model for a judge whose judgments were imported.

    Raises
    ------
    InvalidInput
        If the judge's model is unknown and not given.

    """
    details: dict[str, Any] = get_detector(session, judge).details or {}
    name = model or details.get("model")
    if not name:
        raise InvalidInput(
            f"judge {judge!r} has no recorded model (imported judgments): name the model that "
            "made them",
            field="model",
        )
    url = base_url or (details.get("base_url") if not model else None)
    return {
        "model": name,
        "backend": "remote" if url else "local",
        "base_url": url,
        "mode": details.get("mode") or ("generate" if url else ""),
        "system": details.get("system", DEFAULT_SYSTEM),
        "template": details.get("template", DEFAULT_TEMPLATE),
        "fingerprint": details.get("fingerprint"),
    }


def _one_order_pairs(
    session: Session, benchmark_id: int, judge_id: int, job_id: int
) -> tuple[dict[int, str], int]:
    """``{pair: the order it lacks}`` of pairs judged validly in one order; invalid ones.

    The second value counts pairs whose only judgment is invalid (they cannot flip).
    """
    rows = session.execute(
        select(Judgment.instance_id, Judgment.order, Judgment.choice, Judgment.details)
        .join(Instance, Instance.id == Judgment.instance_id)
        .where(
            Judgment.detector_id == judge_id,
            Instance.benchmark_id == benchmark_id,
            Judgment.order.in_(list(_OTHER)),
        )
    )
    by_pair: dict[int, dict[str, str]] = {}
    for instance_id, order, choice, details in rows:
        if (details or {}).get(REJUDGE_KEY) == job_id:
            continue  # written by this job: the pair was remaining when it started
        by_pair.setdefault(instance_id, {})[order] = choice
    missing: dict[int, str] = {}
    invalid = 0
    for instance_id, orders in by_pair.items():
        if len(orders) != 1:
            continue
        ((order, choice),) = orders.items()
        if choice == Choice.invalid.value:
            invalid += 1
        else:
            missing[instance_id] = _OTHER[order]
    return missing, invalid


def choose_pairs(
    session: Session,
    benchmark_id: int,
    judge_id: int,
    ranker: str,
    budget: int,
    *,
    seed: int,
    job_id: int,
) -> Selection:
    """The ``budget`` remaining pairs the ranker scores highest (ties by a seeded order).

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark_id, judge_id
        The benchmark and the judge detector.
    ranker
        A detector name whose scores rank the pairs, or ``"random"``.
    budget
        Extra judge calls: pairs to re-judge.
    seed
        Seed of the random order and of the order among tied scores.
    job_id
        The re-judging job (its own judgments do not make a pair judged in both orders).

    """
    missing, invalid = _one_order_pairs(session, benchmark_id, judge_id, job_id)
    q_ids = select(Instance.id, Instance.external_id).where(Instance.id.in_(list(missing)))
    external: dict[int, str] = {i: e for i, e in session.execute(q_ids)}
    if ranker == RANDOM:
        scores = {i: 0.0 for i in missing}
    else:
        detector = get_detector(session, ranker)
        q = select(Score.instance_id, Score.score).where(
            Score.detector_id == detector.id, Score.instance_id.in_(list(missing))
        )
        scores = {i: float(s) for i, s in session.execute(q) if s is not None}
    ranked = sorted(
        ((i, external[i], s) for i, s in scores.items()),
        key=lambda r: (-r[2], seeded_rank(seed, r[1]), r[0]),
    )
    chosen = [(i, missing[i]) for i, _, _ in ranked[:budget]]
    return Selection(len(missing), invalid, len(missing) - len(scores), ranked, chosen)


def flips_among(session: Session, judge_id: int, instance_ids: list[int]) -> int:
    """How many of the pairs flip: valid AB and BA judgments of the judge that differ."""
    rows = session.execute(
        select(Judgment.instance_id, Judgment.order, Judgment.choice).where(
            Judgment.detector_id == judge_id,
            Judgment.instance_id.in_(instance_ids),
            Judgment.order.in_(list(_OTHER)),
        )
    )
    by_pair: dict[int, dict[str, str]] = {}
    for instance_id, order, choice in rows:
        by_pair.setdefault(instance_id, {})[order] = choice
    return sum(
        flip_value(o.get(Order.AB.value), o.get(Order.BA.value)) == "1" for o in by_pair.values()
    )
