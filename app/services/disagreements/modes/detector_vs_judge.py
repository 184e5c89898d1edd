"""``detector-vs-judge`` mode: a detector's confident preference against a judge's AB choice."""

from __future__ import annotations

import math

from app.errors import InvalidInput
from app.services.disagreements.modes import base
from app.tables import Choice, Order


@base.register_mode
class DetectorVsJudgeMode(base.DisagreementMode):
    """Items where the detector confidently prefers the identity the judge's AB order did not.

    The detector's score is P(A better); its implied choice is A when ``p >= 0.5``, else B, and
    it is confident when ``max(p, 1 - p) >= min_confidence``. Rule for the judge's AB choice:
    ``invalid`` is skipped (no verdict to contradict); ``tie`` counts as a disagreement with
    any confident detector. Items without an AB judgment or a score are skipped. ``score`` is
    the detector's P(A), ``confidence`` its ``max(p, 1 - p)``, most confident first; equal
    confidences go by the judge's stated AB confidence, highest first.
    """

    name = "detector-vs-judge"
    title = "Detector vs judge"
    help = (
        "A scored detector confidently prefers the response the judge did not choose with A "
        "shown first (a tie always differs; invalid verdicts are skipped); most confident first."
    )
    order = 50
    params = (
        base.min_confidence_param("Cut on the detector's confidence max(p, 1 - p)."),
        base.Param(
            "judge",
            base.ParamKind.JUDGE,
            "Judge",
            "Judge whose AB-order choice is compared.",
            required=True,
        ),
    )

    def find(self, inp: base.ModeInput) -> list[base.Disagreement]:
        """Confident detector preferences that differ from the judge's AB choice."""
        detector, judge = inp.detectors[0], str(inp.params["judge"])
        cut = inp.number("min_confidence")
        inp.require_detector(detector)  # an unknown detector is named before the judge
        ab = {
            iid: per[Order.AB.value]
            for iid, per in inp.judgments(judge).items()
            if Order.AB.value in per
        }
        if not ab:
            raise InvalidInput(
                f"detector {judge!r} has no AB-order judgments on {inp.bench.name!r}"
            )
        scores = inp.scores(detector)
        hits: dict[int, tuple[float, float, str, str, float | None]] = {}
        for iid, judgment in ab.items():
            p = scores.get(iid)
            if p is None or math.isnan(p) or judgment.choice == Choice.invalid.value:
                continue
            confidence = max(p, 1.0 - p)
            implied = Choice.A.value if p >= 0.5 else Choice.B.value
            if confidence >= cut and judgment.choice != implied:
                hits[iid] = (p, confidence, implied, judgment.choice, judgment.confidence)
        info = inp.items_info(hits)
        out = []
        for iid, (p, confidence, implied, choice, stated) in hits.items():
            ext, value = info[iid]
            reason = (
                f"{detector} gives P(A) = {p:.3f} (prefers {implied}); {judge} AB chose {choice}"
            )
            out.append(
                base.Disagreement(
                    iid,
                    ext,
                    value,
                    p,
                    confidence,
                    reason,
                    (*base.confidence_rank(confidence), *base.confidence_rank(stated)),
                )
            )
        return out
