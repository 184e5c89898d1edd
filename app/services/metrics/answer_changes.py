"""Models' answer metrics before and after a relabelling, with the paired change in accuracy.

What review changes on a choice or answer benchmark: each model's accuracy and macro-F1 against
the original and the resolved (or corrected) labels, on the answer metrics' own kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.orm import Session

from app.errors import AppellateError
from app.services.evidence.answer_matrix import AnswerMatrix, load_answers
from app.services.evidence.detectors import RANKER_PREFIX
from app.services.evidence.labelled_items import scored_detectors
from app.services.evidence.labels import label_names
from app.services.metrics.metrics_compare import MetricsComparison, compare_metrics
from app.services.metrics.rankers import DEFAULT_TRAIN_LABEL as DEFECT_LABEL
from app.stats.bootstrap import Estimate, group_bootstrap_answers
from app.stats.label_errors import NO_ANSWER, OFF_OPTIONS
from app.tables import Benchmark

__all__ = [
    "AccuracyChange",
    "AnswerComparison",
    "accuracy_changes",
    "answer_comparison",
    "coded",
]

ACCURACY = "answer_accuracy"
MACRO_F1 = "macro_f1"


@dataclass(frozen=True)
class AccuracyChange:
    """One model's accuracy (and macro-F1) before and after, and the paired change in accuracy.

    ``original`` counts the ``n_original`` items with an original label the model answered,
    ``corrected`` the ``n_corrected`` with a corrected one (items corrected to no single option
    leave it); ``change`` is corrected minus original accuracy on the ``n_both`` items in both,
    with a paired interval on the same resamples (None when there are none). Macro-F1 needs
    classes: None on answer benchmarks (graded right or wrong).
    """

    model: str
    original: Estimate
    n_original: int
    corrected: Estimate
    n_corrected: int
    change: Estimate | None
    n_both: int
    original_macro_f1: Estimate | None = None
    corrected_macro_f1: Estimate | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, each estimate as ``{"value", "ci", "reason"}`` (None where there is none).

        ``reason`` says why ``ci`` is None: too few groups (``app.stats.bootstrap``).
        """
        out: dict[str, Any] = {"model": self.model}
        for name in ("original", "corrected", "change", "original_macro_f1", "corrected_macro_f1"):
            est = getattr(self, name)
            if est is None:
                out[name] = None
            else:
                out[name] = {"value": est.value, "ci": est.ci, "reason": est.reason}
        out.update(n_original=self.n_original, n_corrected=self.n_corrected, n_both=self.n_both)
        return out


def coded(matrix: AnswerMatrix) -> tuple[NDArray[np.int64], NDArray[np.int64], int]:
    """Labels and answers as class indices for the answer kernel.

    Choice items: option indices (label -1 where unlabelled or naming no option; answer
    :data:`NO_ANSWER` or :data:`OFF_OPTIONS`). Answer items are graded: one class, 0 = right.

    Returns
    -------
    labels : ndarray of int64, shape (n,)
    answers : ndarray of int64, shape (n, m)
    n_classes : int

    """
    if matrix.is_choice:
        return matrix.label_codes(), matrix.answer_codes(), matrix.n_classes
    # Graded against this matrix's labels: NaN where there is no answer or no label.
    correct = matrix.correct()  # (n, m)
    labels = np.array([0 if v is not None else -1 for v in matrix.labels], dtype=np.int64)
    answers = np.where(correct == 1.0, 0, OFF_OPTIONS).astype(np.int64)
    answers[np.array([[a is None for a in row] for row in matrix.answers], dtype=bool)] = NO_ANSWER
    return labels, answers, 1


def _estimates(
    labels: NDArray[np.int64],
    answers: NDArray[np.int64],
    groups: NDArray[np.object_],
    n_classes: int,
    resamples: int,
    seed: int,
) -> tuple[Estimate, Estimate | None]:
    """Accuracy and macro-F1 (None with one class) of one model on its labelled items."""
    with_f1 = n_classes >= 2
    if labels.size == 0:
        empty = Estimate(None, None, None, 0, resamples)
        return empty, empty if with_f1 else None
    metrics = (ACCURACY, MACRO_F1) if with_f1 else (ACCURACY,)
    result = group_bootstrap_answers(
        labels, [answers], groups, n_classes, metrics=metrics, resamples=resamples, seed=seed
    )
    return result.estimate(ACCURACY), result.estimate(MACRO_F1) if with_f1 else None


def accuracy_changes(
    before: AnswerMatrix, after: AnswerMatrix, *, resamples: int, seed: int
) -> list[AccuracyChange]:
    """Each model's answer metrics against ``before``'s labels and ``after``'s, and the change.

    The metrics are the answer metrics' own (:func:`app.stats.bootstrap.group_bootstrap_answers`
    on the items the model answered that have a label naming an option), so with the review's
    resolved labels as ``after`` they equal the metrics page's numbers. The change codes each
    item as right or wrong under each labelling (one class, wrong = an answer naming no class)
    and takes the paired difference over the items labelled on both sides.

    Parameters
    ----------
    before, after : AnswerMatrix
        The same benchmark's answers (n items, m models, same rows), with the original and
        the corrected labels.
    resamples, seed : int
        Group-bootstrap resamples (group = the item's group key) and root seed.

    Returns
    -------
    list of AccuracyChange
        One per model, in ``before.models`` order.

    """
    if before.external_ids != after.external_ids or before.models != after.models:
        raise ValueError("the two answer matrices hold different items or models")
    before_codes, before_answers, k = coded(before)
    after_codes, after_answers, _ = coded(after)  # graded answers depend on the label
    groups = np.asarray(before.groups, dtype=object)
    out = []
    for j, model in enumerate(before.models):
        a, b = before_answers[:, j], after_answers[:, j]
        answered = a != NO_ANSWER
        keep_before = answered & (before_codes >= 0)
        keep_after = answered & (after_codes >= 0)
        both = keep_before & keep_after
        change = None
        if both.any():
            right = [
                np.where(x[both] == y[both], 0, OFF_OPTIONS)
                for x, y in ((a, before_codes), (b, after_codes))
            ]
            result = group_bootstrap_answers(
                np.zeros(int(both.sum()), dtype=np.intp),
                right,
                groups[both],
                1,
                metrics=(ACCURACY,),
                resamples=resamples,
                seed=seed,
            )
            change = result.difference(ACCURACY, 1, 0).estimate
        sides = [
            _estimates(codes[keep], x[keep], groups[keep], k, resamples, seed)
            for codes, x, keep in ((before_codes, a, keep_before), (after_codes, b, keep_after))
        ]
        out.append(
            AccuracyChange(
                model=model,
                original=sides[0][0],
                n_original=int(keep_before.sum()),
                corrected=sides[1][0],
                n_corrected=int(keep_after.sum()),
                change=change,
                n_both=int(both.sum()),
                original_macro_f1=sides[0][1],
                corrected_macro_f1=sides[1][1],
            )
        )
    return out


@dataclass(frozen=True)
class AnswerComparison:
    """Before you accept, on a choice or answer benchmark: what the resolved labels change.

    ``changed`` items have a resolved label other than the original; ``models`` holds each
    model's accuracy and macro-F1 on both sides with the paired change; ``rankers`` compares
    the label-error rankers on the ``defect`` label set, original vs resolved (None, with
    ``ranker_note`` saying why, when there is nothing to compare).
    """

    changed: int
    models: list[AccuracyChange]
    rankers: MetricsComparison | None
    ranker_note: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, in the shape of the attributes (a template reads either)."""
        rankers = None
        if self.rankers is not None:
            # Each side's all-items row (the first): the rankers are not sliced here.
            rankers = {
                "detectors": [
                    {
                        "detector": d.detector,
                        **{
                            side: [
                                {
                                    "values": rows[0].values,
                                    "intervals": rows[0].intervals,
                                    "interval_reason": rows[0].interval_reason,
                                }
                            ]
                            for side, rows in (("original", d.original), ("resolved", d.resolved))
                        },
                    }
                    for d in self.rankers.detectors
                ]
            }
        return {
            "changed": self.changed,
            "models": [m.as_dict() for m in self.models],
            "rankers": rankers,
            "ranker_note": self.ranker_note,
        }


def answer_comparison(
    session: Session, bench: Benchmark, label: str, *, k: int, resamples: int, seed: int = 0
) -> AnswerComparison:
    """Each model's answer metrics on ``label``, original vs resolved, and the rankers' on defects.

    Raises
    ------
    InvalidInput
        ``bench`` is not a choice or answer benchmark, or ``k`` is below 1.

    """
    before = load_answers(session, bench, label=label)
    after = load_answers(session, bench, label=label, labels="resolved", k=k)
    changed = sum(a != b for a, b in zip(before.labels, after.labels, strict=True))
    models = accuracy_changes(before, after, resamples=resamples, seed=seed)
    rankers = [d.name for d in scored_detectors(session, bench) if d.name.startswith(RANKER_PREFIX)]
    note = ""
    comparison = None
    if DEFECT_LABEL not in label_names(session, bench.id):
        note = f"{bench.name} has no {DEFECT_LABEL!r} label set to rank defects against"
    elif not rankers:
        note = "no label-error ranker has scored this benchmark (appellate rank-errors)"
    else:
        try:
            comparison = compare_metrics(
                session, bench.name, DEFECT_LABEL, k=k, detectors=rankers,
                resamples=resamples, seed=seed,
            )  # fmt: skip
        except AppellateError as exc:
            note = exc.message
    return AnswerComparison(changed, models, comparison, note)
