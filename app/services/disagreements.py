"""Confident disagreements: items where detectors contradict a label set, or a judge itself.

Modes: ``threshold`` (one detector, fixed cut), ``cleanlab`` (confident learning with per-class
thresholds), ``consensus`` (at least k detectors), ``judge-orders`` (AB vs BA flips) and
``detector-vs-judge`` (a score detector's P(A) against a judge's AB-order choice).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.benchmarks import get_benchmark
from app.services.flips import flip_value
from app.services.judge_summary import OrderedJudgment, judge_orders
from app.services.labels import current_label_subquery
from app.services.metrics import LabelledItems, detector_scores, get_detector, load_labelled
from app.tables import Benchmark, Choice, Instance, Order, Score

__all__ = ["DEFAULT_MIN_CONFIDENCE", "MODES", "Disagreement", "DisagreementList", "disagreements"]

MODES: tuple[str, ...] = (
    "threshold",
    "cleanlab",
    "consensus",
    "judge-orders",
    "detector-vs-judge",
)
DEFAULT_MIN_CONFIDENCE = 0.8
"""Default cut on the probability of the other class (threshold, consensus, detector-vs-judge)."""


@dataclass(frozen=True)
class Disagreement:
    """One ranked item.

    ``score`` is the detector's P(positive class) (the mean over the disagreeing detectors in
    consensus mode; in judge-orders mode P(A) from the AB verdict logits, when present; in
    detector-vs-judge mode the detector's P(A));
    ``confidence`` is what the list is ranked by (the probability of the class opposite to the
    label; in judge-orders mode the smaller of the two orders' verbalised confidences, or of
    their verdict-logit margins; in detector-vs-judge mode the detector's ``max(p, 1 - p)``).
    """

    instance_id: int
    external_id: str
    label: str | None
    score: float | None
    confidence: float | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The JSON item of ``appellate disagreements --json``."""
        return {
            "external_id": self.external_id,
            "label": self.label,
            "score": self.score,
            "confidence": self.confidence,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class DisagreementList:
    """A ranked list and the parameters that produced it; ``total`` counts before ``limit``."""

    benchmark: str
    label: str
    mode: str
    detectors: list[str]
    positive: str | None
    min_confidence: float | None
    k: int | None
    total: int
    items: list[Disagreement]
    judge: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of ``appellate disagreements --json``."""
        return {
            "benchmark": self.benchmark,
            "label": self.label,
            "mode": self.mode,
            "detectors": self.detectors,
            "positive": self.positive,
            "min_confidence": self.min_confidence,
            "k": self.k,
            "judge": self.judge,
            "total": self.total,
            "items": [item.as_dict() for item in self.items],
        }


def _probabilities(session: Session, name: str, items: LabelledItems) -> NDArray[np.float64]:
    p = detector_scores(session, get_detector(session, name), items)
    _check_probabilities(name, p, "the labelled items")
    return p


def _check_probabilities(name: str, p: NDArray[np.float64], where: str) -> None:
    """Raise :class:`InvalidInput` unless ``p`` has a finite score and all lie in [0, 1]."""
    finite = p[~np.isnan(p)]
    if finite.size == 0:
        raise InvalidInput(f"detector {name!r} has no scores on {where}")
    if finite.min() < 0.0 or finite.max() > 1.0:
        raise InvalidInput(
            f"detector {name!r} scores are not probabilities in [0, 1]; disagreement modes "
            "read them as P(positive class)"
        )


def _against_label(items: LabelledItems, p: NDArray[np.float64]) -> NDArray[np.float64]:
    """The probability each item belongs to the class opposite to its label (NaN if unscored)."""
    return np.where(items.y == 1, 1.0 - p, p)


def _threshold_mode(
    session: Session, items: LabelledItems, detector: str, cut: float
) -> list[Disagreement]:
    p = _probabilities(session, detector, items)
    other = _against_label(items, p)
    hits = np.flatnonzero(~np.isnan(other) & (other >= cut))
    return [
        Disagreement(
            int(items.instance_ids[i]),
            items.external_ids[i],
            items.values[i],
            float(p[i]),
            float(other[i]),
            f"{detector} gives P({items.target.other(items.values[i])}) = {other[i]:.3f} "
            f"against label {items.values[i]}",
        )
        for i in hits
    ]


def _cleanlab_mode(session: Session, items: LabelledItems, detector: str) -> list[Disagreement]:
    # Imported here: cleanlab pulls in a large stack that the other modes do not need.
    from cleanlab.filter import find_label_issues

    p_all = _probabilities(session, detector, items)
    scored = np.flatnonzero(~np.isnan(p_all))
    y = items.y[scored].astype(np.int64)
    if np.unique(y).size < 2:
        raise InvalidInput("cleanlab mode needs both classes among the scored items")
    p = p_all[scored]
    pred_probs = np.column_stack([1.0 - p, p])
    # Confident learning: an item is an issue when it is counted off the diagonal of the
    # confident joint, i.e. its probability for another class clears that class's own
    # threshold (the mean self-confidence of the class). Ranked by self-confidence, lowest first.
    ranked = find_label_issues(
        y,
        pred_probs,
        filter_by="confident_learning",
        return_indices_ranked_by="self_confidence",
        n_jobs=1,
    )
    out = []
    for j in ranked:
        i = int(scored[j])
        other = float(pred_probs[j, 1 - y[j]])
        out.append(
            Disagreement(
                int(items.instance_ids[i]),
                items.external_ids[i],
                items.values[i],
                float(p[j]),
                other,
                f"confident learning: {detector} gives P({items.target.other(items.values[i])})"
                f" = {other:.3f} against label {items.values[i]}",
            )
        )
    return out


def _consensus_mode(
    session: Session, items: LabelledItems, detectors: Sequence[str], cut: float, k: int
) -> list[Disagreement]:
    probs = np.stack([_probabilities(session, name, items) for name in detectors])
    others = np.stack([_against_label(items, p) for p in probs])
    confident = ~np.isnan(others) & (others >= cut)
    votes = confident.sum(axis=0)
    out: list[tuple[int, Disagreement]] = []
    for i in np.flatnonzero(votes >= k):
        who = np.flatnonzero(confident[:, i])
        against = items.target.other(items.values[i])
        parts = ", ".join(f"{detectors[d]} P({against}) = {others[d, i]:.3f}" for d in who)
        item = Disagreement(
            int(items.instance_ids[i]),
            items.external_ids[i],
            items.values[i],
            float(probs[who, i].mean()),
            float(others[who, i].mean()),
            f"{who.size} of {len(detectors)} detectors against label {items.values[i]}: {parts}",
        )
        out.append((int(who.size), item))
    # More detectors first, then the more confident disagreement.
    out.sort(key=lambda pair: (-pair[0], *_rank_key(pair[1])))
    return [item for _, item in out]


def _margin(judgment: OrderedJudgment) -> float | None:
    logits = judgment.verdict_logits or {}
    a, b = logits.get("A"), logits.get("B")
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(float(a) - float(b))
    return None


def _p_a(judgment: OrderedJudgment) -> float | None:
    logits = judgment.verdict_logits or {}
    a, b = logits.get("A"), logits.get("B")
    if isinstance(a, int | float) and isinstance(b, int | float):
        return 1.0 / (1.0 + math.exp(float(b) - float(a)))
    return None


def _judge_orders_mode(
    session: Session, bench: Benchmark, judge: str, label: str
) -> list[Disagreement]:
    detector = get_detector(session, judge)
    per_instance = judge_orders(session, bench, [detector.id]).get(detector.id, {})
    pairs = {
        iid: (per[Order.AB.value], per[Order.BA.value])
        for iid, per in per_instance.items()
        if Order.AB.value in per and Order.BA.value in per
    }
    if not pairs:
        raise InvalidInput(f"detector {judge!r} has no pairs judged in both orders")
    flipped = {
        iid: (ab, ba) for iid, (ab, ba) in pairs.items() if flip_value(ab.choice, ba.choice) == "1"
    }
    # One certainty measure for the whole list: verbalised confidence when the judge states
    # it, else the verdict-logit margin. A flip is striking when *both* orders were certain,
    # hence the smaller of the two.
    every = [j for pair in pairs.values() for j in pair]
    if any(j.confidence is not None for j in every):
        measure, ranked_by = (lambda j: j.confidence), "verbalised confidence"
    elif any(_margin(j) is not None for j in every):
        measure, ranked_by = _margin, "verdict-logit margin"
    else:
        measure, ranked_by = (lambda j: None), None
    info = _instance_info(session, list(flipped), label)
    out = []
    for iid, (ab, ba) in flipped.items():
        values = [measure(ab), measure(ba)]
        known = [v for v in values if v is not None]
        certainty = min(known) if known else None
        reason = f"AB chose {ab.choice}, BA chose {ba.choice}"
        if ranked_by is not None:
            shown = ", ".join("n/a" if v is None else f"{v:.3g}" for v in values)
            reason += f"; {ranked_by} AB/BA = {shown}"
        ext, value = info[iid]
        out.append(Disagreement(iid, ext, value, _p_a(ab), certainty, reason))
    return out


def _instance_info(
    session: Session, instance_ids: list[int], label: str
) -> dict[int, tuple[str, str | None]]:
    """``{instance_id: (external_id, current value of label or None)}``."""
    q = select(Instance.id, Instance.external_id, current_label_subquery(label)).where(
        Instance.id.in_(instance_ids)
    )
    return {iid: (ext, value) for iid, ext, value in session.execute(q)}


def _detector_vs_judge_mode(
    session: Session, bench: Benchmark, detector: str, judge: str, label: str, cut: float
) -> list[Disagreement]:
    """Items where ``detector`` confidently prefers the identity the judge's AB order did not.

    The detector's score is P(A better); its implied choice is A when ``p >= 0.5``, else B, and
    it is confident when ``max(p, 1 - p) >= cut``. Rule for the judge's AB choice: ``invalid``
    is skipped (no verdict to contradict); ``tie`` counts as a disagreement with any confident
    detector. Items without an AB judgment or a score are skipped.
    """
    scorer = get_detector(session, detector)
    judge_row = get_detector(session, judge)
    per_instance = judge_orders(session, bench, [judge_row.id]).get(judge_row.id, {})
    ab = {iid: per[Order.AB.value] for iid, per in per_instance.items() if Order.AB.value in per}
    if not ab:
        raise InvalidInput(f"detector {judge!r} has no AB-order judgments on {bench.name!r}")
    q = (
        select(Score.instance_id, Score.score)
        .join(Instance, Instance.id == Score.instance_id)
        .where(Score.detector_id == scorer.id, Instance.benchmark_id == bench.id)
    )
    scores = {int(iid): float(score) for iid, score in session.execute(q) if score is not None}
    _check_probabilities(
        detector, np.fromiter(scores.values(), dtype=np.float64, count=len(scores)), bench.name
    )
    hits: dict[int, tuple[float, float, str, str]] = {}
    for iid, judgment in ab.items():
        p = scores.get(iid)
        if p is None or math.isnan(p) or judgment.choice == Choice.invalid.value:
            continue
        confidence = max(p, 1.0 - p)
        implied = Choice.A.value if p >= 0.5 else Choice.B.value
        if confidence >= cut and judgment.choice != implied:
            hits[iid] = (p, confidence, implied, judgment.choice)
    info = _instance_info(session, list(hits), label)
    out = []
    for iid, (p, confidence, implied, choice) in hits.items():
        ext, value = info[iid]
        reason = f"{detector} gives P(A) = {p:.3f} (prefers {implied}); {judge} AB chose {choice}"
        out.append(Disagreement(iid, ext, value, p, confidence, reason))
    return out


def _rank_key(item: Disagreement) -> tuple[bool, float, str]:
    """Most confident first, unknown confidence last, ties by external id (a stable order)."""
    return (item.confidence is None, -(item.confidence or 0.0), item.external_id)


def disagreements(
    session: Session,
    benchmark: str,
    detectors: Sequence[str],
    *,
    label: str = "reference",
    mode: str = "threshold",
    min_confidence: float | None = None,
    k: int | None = None,
    positive: str | None = None,
    limit: int | None = None,
    judge: str | None = None,
) -> DisagreementList:
    """Items where detectors confidently contradict a label set, ranked, most confident first.

    Detector scores are read as P(positive class), the class given by
    :func:`app.services.metrics.binary_target` (``"A"`` for ``reference``, ``"1"`` for 1/0
    label sets), and are treated as out-of-fold probabilities.

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark
        Benchmark name.
    detectors
        Detector names: exactly one except in consensus mode (one or more); in judge-orders
        mode a judge with AB and BA judgments; in detector-vs-judge mode the score detector
        (scores read as P(A better)).
    label
        Label set the items are compared with (judge-orders mode only shows its value).
    mode
        ``threshold``: items whose probability for the other class is ``>= min_confidence``.
        ``cleanlab``: confident-learning label issues (``cleanlab.filter.find_label_issues``,
        ``filter_by="confident_learning"``: per-class thresholds), further cut at
        ``min_confidence`` only when it is given.
        ``consensus``: items where at least ``k`` detectors (default all) have a probability
        for the other class ``>= min_confidence``; ranked by that count, then mean confidence.
        ``judge-orders``: pairs whose AB and BA choices differ (flips), ranked by the smaller
        verbalised confidence (or verdict-logit margin) of the two orders.
        ``detector-vs-judge``: items where the detector's confidence ``max(p, 1 - p)`` is
        ``>= min_confidence`` and its implied choice (A if ``p >= 0.5``, else B) differs from
        ``judge``'s AB-order choice; an ``invalid`` AB choice is skipped, a ``tie`` counts as a
        disagreement. Ranked by the detector's confidence.
    min_confidence
        Cut on the probability of the other class, in [0, 1]; default
        ``DEFAULT_MIN_CONFIDENCE`` for threshold, consensus and detector-vs-judge.
    k
        Consensus quorum, 1 <= k <= len(detectors).
    positive
        Explicit positive class of the label set.
    limit
        Keep the first ``limit`` items (``total`` still counts all).
    judge
        Judge name (a detector with judgments); detector-vs-judge mode only, and required there.

    Returns
    -------
    DisagreementList

    Raises
    ------
    NotFound
        Unknown benchmark, label set, detector or judge.
    InvalidInput
        Unknown mode, wrong number of detectors, bad cut, quorum or limit, scores that are not
        probabilities, a non-binary label set, a judge missing (or given outside
        detector-vs-judge mode) or without AB-order judgments.

    """
    if mode not in MODES:
        raise InvalidInput(f"unknown mode {mode!r}; choose from {list(MODES)}")
    names = list(dict.fromkeys(detectors))
    if not names:
        raise InvalidInput("name at least one detector")
    if mode != "consensus" and len(names) != 1:
        raise InvalidInput(f"{mode} mode takes exactly one detector, got {len(names)}")
    if min_confidence is not None and not 0.0 <= min_confidence <= 1.0:
        raise InvalidInput(f"min_confidence must lie in [0, 1], got {min_confidence}")
    if limit is not None and limit < 0:
        raise InvalidInput(f"limit must be >= 0, got {limit}")
    if mode == "consensus":
        k = len(names) if k is None else k
        if not 1 <= k <= len(names):
            raise InvalidInput(f"k must lie in [1, {len(names)}], got {k}")
    elif k is not None:
        raise InvalidInput("k applies to consensus mode only")
    if mode == "detector-vs-judge" and not judge:
        raise InvalidInput("detector-vs-judge mode needs a judge")
    if mode != "detector-vs-judge" and judge is not None:
        raise InvalidInput("judge applies to detector-vs-judge mode only")
    cut = DEFAULT_MIN_CONFIDENCE if min_confidence is None else min_confidence

    bench = get_benchmark(session, benchmark)
    target_positive: str | None = None
    if mode == "judge-orders":
        found = sorted(_judge_orders_mode(session, bench, names[0], label), key=_rank_key)
        cut_used = None
    elif mode == "detector-vs-judge":
        assert judge is not None
        found = sorted(
            _detector_vs_judge_mode(session, bench, names[0], judge, label, cut), key=_rank_key
        )
        cut_used = cut
    else:
        items = load_labelled(session, bench, label, positive=positive)
        target_positive = items.target.positive
        cut_used = cut
        if mode == "threshold":
            found = sorted(_threshold_mode(session, items, names[0], cut), key=_rank_key)
        elif mode == "cleanlab":
            # Keep cleanlab's own ranking (self-confidence, lowest first = most suspicious).
            found = _cleanlab_mode(session, items, names[0])
            cut_used = min_confidence
            if min_confidence is not None:
                found = [d for d in found if (d.confidence or 0.0) >= min_confidence]
        else:
            assert k is not None
            found = _consensus_mode(session, items, names, cut, k)
    return DisagreementList(
        benchmark=bench.name,
        label=label,
        mode=mode,
        detectors=names,
        positive=target_positive,
        min_confidence=cut_used,
        k=k,
        total=len(found),
        items=found if limit is None else found[:limit],
        judge=judge,
    )
