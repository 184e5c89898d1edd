"""``judge-orders`` mode: pairs whose judge chose differently in the AB and BA orders."""

from __future__ import annotations

import math
from collections.abc import Callable

from app.errors import InvalidInput
from app.services.disagreements.modes import base
from app.services.evidence.flips import flip_value
from app.services.evidence.judge_scores import Verdict
from app.tables import Order

Measure = Callable[[Verdict], float | None]


def _logits(judgment: Verdict) -> tuple[float, float] | None:
    logits = judgment.verdict_logits or {}
    a, b = logits.get("A"), logits.get("B")
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a), float(b)
    return None


def _margin(judgment: Verdict) -> float | None:
    logits = _logits(judgment)
    return None if logits is None else abs(logits[0] - logits[1])


def _p_a(judgment: Verdict) -> float | None:
    logits = _logits(judgment)
    return None if logits is None else 1.0 / (1.0 + math.exp(logits[1] - logits[0]))


def _measure(judgments: list[Verdict]) -> tuple[Measure, str | None]:
    """One certainty measure for the whole list, and its name.

    Verbalised confidence when the judge states it, else the verdict-logit margin.
    """
    if any(j.confidence is not None for j in judgments):
        return (lambda j: j.confidence), "verbalised confidence"
    if any(_margin(j) is not None for j in judgments):
        return _margin, "verdict-logit margin"
    return (lambda j: None), None


@base.register_mode
class JudgeOrdersMode(base.DisagreementMode):
    """Flipped pairs, ranked by the smaller certainty of the two orders.

    ``confidence`` is the smaller of the two orders' verbalised confidences (or, when the judge
    states none, of their verdict-logit margins); ``score`` is P(A) from the AB verdict
    logits, when present.
    """

    name = "judge-orders"
    title = "Judge orders"
    help = (
        "Pairs whose judge chose differently with A shown first and with B shown first (flips); "
        "ranked by the smaller verbalised confidence (or verdict-logit margin) of the two orders."
    )
    order = 40
    detectors = base.DetectorSpec(base.DetectorKind.JUDGE)

    def find(self, inp: base.ModeInput) -> list[base.Disagreement]:
        """The flips; a flip is striking when both orders were certain, hence the minimum."""
        judge = inp.detectors[0]
        pairs = {
            iid: (per[Order.AB.value], per[Order.BA.value])
            for iid, per in inp.judgments(judge).items()
            if Order.AB.value in per and Order.BA.value in per
        }
        if not pairs:
            raise InvalidInput(f"detector {judge!r} has no pairs judged in both orders")
        flipped = {
            iid: (ab, ba)
            for iid, (ab, ba) in pairs.items()
            if flip_value(ab.choice, ba.choice) == "1"
        }
        measure, ranked_by = _measure([j for pair in pairs.values() for j in pair])
        info = inp.items_info(flipped)
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
            out.append(
                base.Disagreement(
                    iid, ext, value, _p_a(ab), certainty, reason, base.confidence_rank(certainty)
                )
            )
        return out
