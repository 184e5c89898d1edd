"""``threshold`` mode: one detector's probability for the other class clears a fixed cut."""

from __future__ import annotations

import numpy as np

from app.services.disagreements.modes import base
from app.services.disagreements.modes.inputs import against_label


@base.register_mode
class ThresholdMode(base.DisagreementMode):
    """Items whose probability for the class opposite to the label is ``>= min_confidence``.

    ``score`` is the detector's P(positive class), ``confidence`` its P(other class); most
    confident first, then the items the benchmark's other probability detectors doubt most.
    """

    name = "threshold"
    title = "Threshold"
    help = (
        "One detector's probability for the class opposite to the label is at least the cut; "
        "most confident first."
    )
    order = 10
    labels = base.LabelUse.BINARY
    params = (base.min_confidence_param("Cut on P(other class)."),)

    def find(self, inp: base.ModeInput) -> list[base.Disagreement]:
        """Items whose P(other class) is at least the cut, ranked by it."""
        items, detector = inp.labelled, inp.detectors[0]
        p = inp.probabilities(detector)
        other = against_label(items, p)
        hits = np.flatnonzero(~np.isnan(other) & (other >= inp.number("min_confidence")))
        others = inp.others_against_label([detector])
        return [
            base.Disagreement(
                int(items.instance_ids[i]),
                items.external_ids[i],
                items.values[i],
                float(p[i]),
                float(other[i]),
                f"{detector} gives P({items.target.other(items.values[i])}) = {other[i]:.3f} "
                f"against label {items.values[i]}",
                (
                    *base.confidence_rank(float(other[i])),
                    *base.confidence_rank(None if np.isnan(others[i]) else float(others[i])),
                ),
            )
            for i in hits
        ]
