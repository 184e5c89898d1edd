"""Each judge's one verdict per pair, for comparing judges with labels: both orders folded into one.

A pair judged in both orders gets the common choice when the orders agree and ``tie`` when they
disagree (FastChat's rule for a position-inconsistent pair); a pair judged in one order only gets
that order's choice; an invalid order, or none, gives no verdict. Repeats of an order
(``AB-repeat``) are controls and are left out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.evidence.judge_scores import Verdict, judge_orders
from app.tables import Choice, Detector, Order

__all__ = ["VERDICTS", "common_or_tie", "folded_verdict", "judge_verdicts"]

VERDICTS: tuple[str, ...] = (Choice.A.value, Choice.B.value, Choice.tie.value)
"""The values a folded verdict takes, in display order."""
_ORDERS = (Order.AB.value, Order.BA.value)


def folded_verdict(orders: Mapping[str, Verdict]) -> str | None:
    """The one verdict of a pair from its judgments by order (see the module docstring)."""
    choices = [orders[o].choice for o in _ORDERS if o in orders]
    if not choices or Choice.invalid.value in choices:
        return None
    return common_or_tie(choices)


def common_or_tie(choices: Sequence[str]) -> str:
    """The choice every order made (as identities, A = response A), else a tie.

    The both-order debiased verdict: a judge that changes its mind with the order has no
    preference that survives the swap.
    """
    first = choices[0]
    return first if all(c == first for c in choices) else Choice.tie.value


def judge_verdicts(
    session: Session, benchmark_id: int, instance_ids: Collection[int] | None = None
) -> dict[str, dict[int, str]]:
    """``{judge name: {instance id: folded verdict}}`` of every detector that judged pairs here.

    Pairs without a verdict are absent; ``instance_ids`` restricts the pairs read.
    """
    by_detector = judge_orders(session, benchmark_id)
    if not by_detector:
        return {}
    names = dict(
        session.execute(
            select(Detector.id, Detector.name).where(Detector.id.in_(list(by_detector)))
        ).all()
    )
    wanted = None if instance_ids is None else set(instance_ids)
    out: dict[str, dict[int, str]] = {}
    for detector_id, pairs in by_detector.items():
        verdicts = {}
        for iid, orders in pairs.items():
            if wanted is not None and iid not in wanted:
                continue
            verdict = folded_verdict(orders)
            if verdict is not None:
                verdicts[iid] = verdict
        out[names[detector_id]] = verdicts
    return dict(sorted(out.items()))
