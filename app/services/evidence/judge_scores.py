"""Two-order judges as detectors: a score per pair, P(A is better), derived from the verdicts.

A judge that saw a pair in both presentation orders gives label set ``reference`` a score, so
judges and reward models share one metric matrix. Where both orders stored verdict logits the
score is the mean over the orders of ``sigmoid(logit_A - logit_B)`` (averaging cancels the
position bias, as for reward models); otherwise it is the mean of the two choices read as
``A = 1, tie = 0.5, B = 0`` (both A: 1, a split: 0.5, both B: 0). A pair with an invalid or a
missing order gets no score.

The scores are rows of ``scores`` marked ``details["derived"] == DERIVED``;
:func:`store_judge_scores` brings them up to date (idempotent) whenever the flips are
recomputed, and never touches a score of the same detector that came from elsewhere (an import).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.tables import Choice, Instance, Judgment, Order, Score

__all__ = [
    "DERIVED",
    "JudgeScore",
    "Verdict",
    "judge_orders",
    "pair_score",
    "sigmoid",
    "store_judge_scores",
]

DERIVED = "two-order judge"
RULE_LOGITS = "mean over AB and BA of sigmoid(logit_A - logit_B)"
RULE_CHOICES = "mean over AB and BA of the choice (A = 1, tie = 0.5, B = 0)"
_CHOICE_VALUE = {Choice.A.value: 1.0, Choice.tie.value: 0.5, Choice.B.value: 0.0}
_ORDERS = (Order.AB.value, Order.BA.value)


def sigmoid(x: float) -> float:
    """The logistic function, written per sign so large gaps neither overflow nor lose precision."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@dataclass(frozen=True)
class Verdict:
    """One judgment of a pair: the identity chosen, its logits and its stated certainty.

    ``verdict_logits`` is ``{"A": logit, "B": logit}`` where stored; ``confidence`` the
    judge's stated certainty where it gave one.
    """

    choice: str
    verdict_logits: Mapping[str, Any] | None = None
    confidence: float | None = None


def judge_orders(
    session: Session,
    benchmark_id: int,
    detector_ids: Iterable[int] | None = None,
    orders: Iterable[str] | None = None,
) -> dict[int, dict[int, dict[str, Verdict]]]:
    """Judgments on the benchmark as ``{detector_id: {instance_id: {order: verdict}}}``.

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark_id
        The benchmark.
    detector_ids
        Restrict to these judges.
    orders
        Restrict to these presentation orders (all when None).

    """
    q = (
        select(
            Judgment.detector_id,
            Judgment.instance_id,
            Judgment.order,
            Judgment.choice,
            Judgment.verdict_logits,
            Judgment.confidence,
        )
        .join(Instance, Instance.id == Judgment.instance_id)
        .where(Instance.benchmark_id == benchmark_id)
    )
    if detector_ids is not None:
        q = q.where(Judgment.detector_id.in_(list(detector_ids)))
    if orders is not None:
        q = q.where(Judgment.order.in_(list(orders)))
    out: dict[int, dict[int, dict[str, Verdict]]] = defaultdict(lambda: defaultdict(dict))
    for detector_id, instance_id, order, choice, logits, confidence in session.execute(q):
        out[detector_id][instance_id][order] = Verdict(choice, logits, confidence)
    return out


@dataclass(frozen=True)
class JudgeScore:
    """A pair's derived score in [0, 1] and what it was computed from (the score's details)."""

    score: float
    details: dict[str, Any]


def _logit_gap(verdict: Verdict) -> float | None:
    """``logit_A - logit_B`` of a valid verdict with both logits finite, else None."""
    logits = verdict.verdict_logits
    if verdict.choice == Choice.invalid or not isinstance(logits, Mapping):
        return None
    pair = [logits.get("A"), logits.get("B")]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair):
        return None
    gap = float(pair[0]) - float(pair[1])  # type: ignore[arg-type]
    return gap if math.isfinite(gap) else None


def pair_score(ab: Verdict | None, ba: Verdict | None) -> JudgeScore | None:
    """P(A is better) of one pair from its AB and BA verdicts; None unless both orders count.

    Parameters
    ----------
    ab, ba
        The verdicts in the two orders (identity terms), or None where the order is missing.

    Returns
    -------
    JudgeScore or None
        From the logits when both orders have them, else from the two choices; None when an
        order is missing or its choice is invalid (the pair is not retained, as for flips).

    """
    if ab is None or ba is None:
        return None
    gaps = [_logit_gap(ab), _logit_gap(ba)]
    if all(g is not None for g in gaps):
        p = [sigmoid(g) for g in gaps if g is not None]
        details = {"rule": RULE_LOGITS, "p_ab": p[0], "p_ba": p[1]}
        return JudgeScore((p[0] + p[1]) / 2, {"derived": DERIVED, **details})
    values = [_CHOICE_VALUE.get(v.choice) for v in (ab, ba)]
    if values[0] is None or values[1] is None:
        return None
    details = {"rule": RULE_CHOICES, "choice_ab": ab.choice, "choice_ba": ba.choice}
    return JudgeScore((values[0] + values[1]) / 2, {"derived": DERIVED, **details})


def store_judge_scores(
    session: Session,
    benchmark_id: int,
    detector_id: int,
    verdicts: Mapping[int, Mapping[str, Verdict]],
) -> int:
    """Make the judge's derived scores on the benchmark match ``verdicts``; returns rows changed.

    Scores are added, updated or deleted only where the derived value changes, so a second call
    with the same verdicts changes nothing. A score of the detector that was not derived (an
    imported one) is left as it is, and no derived score is written over it.

    Parameters
    ----------
    session
        The caller's session; flushed, never committed (the caller bumps the data version).
    benchmark_id, detector_id
        Where and whose scores.
    verdicts
        ``{instance id: {order: verdict}}`` of every judgment of the judge on the benchmark.

    """
    wanted: dict[int, JudgeScore] = {}
    for instance_id, per in verdicts.items():
        derived = pair_score(*(per.get(o) for o in _ORDERS))
        if derived is not None:
            wanted[instance_id] = derived
    q = (
        select(Score)
        .join(Instance, Instance.id == Score.instance_id)
        .where(Score.detector_id == detector_id, Instance.benchmark_id == benchmark_id)
    )
    existing = {s.instance_id: s for s in session.scalars(q)}
    changed = 0
    for instance_id, row in existing.items():
        if (row.details or {}).get("derived") != DERIVED:
            wanted.pop(instance_id, None)  # imported evidence wins over a derived score
        elif instance_id not in wanted:
            session.delete(row)
            changed += 1
        elif row.score != wanted[instance_id].score or row.details != wanted[instance_id].details:
            row.score, row.details = wanted[instance_id].score, wanted[instance_id].details
            changed += 1
    new = [i for i in wanted if i not in existing]
    session.add_all(
        Score(
            detector_id=detector_id,
            instance_id=i,
            score=wanted[i].score,
            details=wanted[i].details,
        )
        for i in new
    )
    session.flush()
    return changed + len(new)
