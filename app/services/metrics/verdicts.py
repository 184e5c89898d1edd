"""Verdicts on labels that the label-error combiner learns from: expert errata and review.

A verdict says whether an item's label is wrong (1) or fine (0). It comes from

- the resolved outcome of review (an adjudication, or unanimous votes of ``k`` people): on the
  ``reference`` label, "label wrong" when the resolved value differs from the original (another
  option, or an outcome such as "no correct option") and "label fine" when review kept it; on
  the training label set itself (e.g. a ``defect`` queue), its resolved ``1``/``0``;
- else the training label set's original value (expert errata such as MMLU-Redux's ``defect``).

Review wins over the original value: it is the newer, human decision on that item.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.evidence.answer_matrix import ANSWER_LABEL
from app.services.evidence.labels import REVIEW_SOURCES, current_label_subquery
from app.services.evidence.resolution import Resolution, fold, latest_events
from app.tables import Instance, LabelEvent

__all__ = ["REVIEW_K", "review_verdicts", "verdict_of", "verdict_vector"]

REVIEW_K = 2
"""Agreeing votes that make a verdict without an adjudication."""
_BINARY = {"1": 1, "0": 0}


def verdict_of(label: str, train_label: str, res: Resolution) -> int | None:
    """1 (label wrong), 0 (label fine) or None (no verdict) from one resolved review."""
    if res.rule == "original" or res.resolved is None:
        return None
    if label == train_label:
        return _BINARY.get(res.resolved)
    return int(res.resolved != res.original)


def review_verdicts(session: Session, benchmark_id: int, train_label: str) -> dict[int, int]:
    """``{instance id: 0/1}`` from resolved review of ``reference`` and ``train_label``.

    Only instances with a review event are read (one statement for their ids, one for their
    events). Where both label sets were reviewed, the training label set's verdict is used.
    """
    labels = list(dict.fromkeys([ANSWER_LABEL, train_label]))
    reviewed = (
        select(LabelEvent.instance_id)
        .join(Instance, Instance.id == LabelEvent.instance_id)
        .where(
            Instance.benchmark_id == benchmark_id,
            LabelEvent.label_name.in_(labels),
            LabelEvent.source.in_(REVIEW_SOURCES),
        )
        .distinct()
    )
    found: dict[tuple[int, str], int] = {}
    for (iid, label), (_ext, res) in fold(
        latest_events(session, reviewed, labels), REVIEW_K
    ).items():
        verdict = verdict_of(label, train_label, res)
        if verdict is not None:
            found[(iid, label)] = verdict
    out = {iid: v for (iid, label), v in found.items() if label == ANSWER_LABEL}
    out.update({iid: v for (iid, label), v in found.items() if label == train_label})
    return out


def verdict_vector(
    session: Session, benchmark_id: int, instance_ids: NDArray[np.int64], train_label: str
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Verdicts of the items in ``instance_ids`` order: (merged, original errata only).

    Returns
    -------
    (ndarray of float64 of shape (n,), ndarray of float64 of shape (n,))
        1/0 per item, NaN where there is none: review where reviewed, else the training label
        set's original value; and the training label set's original values alone.

    """
    errata = dict(
        session.execute(
            select(Instance.id, current_label_subquery(train_label)).where(
                Instance.benchmark_id == benchmark_id
            )
        ).all()
    )
    original = np.array(
        [_BINARY.get(errata.get(int(i)) or "", np.nan) for i in instance_ids], dtype=np.float64
    )
    review = review_verdicts(session, benchmark_id, train_label)
    merged = original.copy()
    for row, iid in enumerate(instance_ids):
        verdict = review.get(int(iid))
        if verdict is not None:
            merged[row] = verdict
    return merged, original
