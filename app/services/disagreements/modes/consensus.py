"""``consensus`` mode: at least k detectors confidently contradict the label."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from app.errors import InvalidInput
from app.services.disagreements.modes import base
from app.services.disagreements.modes.inputs import against_label


@base.register_mode
class ConsensusMode(base.DisagreementMode):
    """Items where at least ``k`` detectors have P(other class) ``>= min_confidence``.

    Ranked by that count, then by the mean confidence of the disagreeing detectors.
    ``score`` is their mean P(positive class), ``confidence`` their mean P(other class).
    """

    name = "consensus"
    title = "Consensus"
    help = (
        "At least k of the chosen detectors (default all) give the class opposite to the label "
        "a probability of at least the cut; more detectors first, then the more confident."
    )
    order = 30
    detectors = base.DetectorSpec(base.DetectorKind.SCORED, many=True)
    labels = base.LabelUse.BINARY
    params = (
        base.min_confidence_param("Cut on P(other class), per detector."),
        base.Param(
            "k",
            base.ParamKind.INTEGER,
            "k (quorum)",
            "Detectors that must disagree; default all chosen.",
            low=1,
            unset="all",
        ),
    )

    def settle(
        self, detectors: Sequence[str], values: Mapping[str, base.ParamValue]
    ) -> dict[str, base.ParamValue | None]:
        """Defaults, with ``k`` defaulting to every detector and bounded by their number."""
        out = super().settle(detectors, values)
        k = len(detectors) if out["k"] is None else out["k"]
        if not isinstance(k, int) or not 1 <= k <= len(detectors):
            raise InvalidInput(f"k must lie in [1, {len(detectors)}], got {k}")
        out["k"] = k
        return out

    def find(self, inp: base.ModeInput) -> list[base.Disagreement]:
        """Items with at least ``k`` confident disagreeing detectors."""
        items, names = inp.labelled, inp.detectors
        probs = np.stack([inp.probabilities(name) for name in names])
        others = np.stack([against_label(items, p) for p in probs])
        confident = ~np.isnan(others) & (others >= inp.number("min_confidence"))
        votes = confident.sum(axis=0)
        out = []
        for i in np.flatnonzero(votes >= inp.number("k")):
            who = np.flatnonzero(confident[:, i])
            against = items.target.other(items.values[i])
            parts = ", ".join(f"{names[d]} P({against}) = {others[d, i]:.3f}" for d in who)
            mean_other = float(others[who, i].mean())
            out.append(
                base.Disagreement(
                    int(items.instance_ids[i]),
                    items.external_ids[i],
                    items.values[i],
                    float(probs[who, i].mean()),
                    mean_other,
                    f"{who.size} of {len(names)} detectors against label {items.values[i]}: "
                    f"{parts}",
                    # More detectors first, then the more confident disagreement.
                    (-float(who.size), *base.confidence_rank(mean_other)),
                )
            )
        return out
