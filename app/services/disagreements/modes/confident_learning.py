"""``cleanlab`` mode: confident learning (per-class thresholds) over one detector's scores."""

from __future__ import annotations

import numpy as np

from app.errors import InvalidInput
from app.services.disagreements.modes import base


@base.register_mode
class CleanlabMode(base.DisagreementMode):
    """Label issues found by ``cleanlab.filter.find_label_issues`` (confident learning).

    Ranked as cleanlab ranks them (self-confidence, lowest first = most suspicious); cut further
    at ``min_confidence`` only when it is given. ``score`` is the detector's P(positive class),
    ``confidence`` its P(other class).
    """

    name = "cleanlab"
    title = "Confident learning"
    help = (
        "Confident learning (cleanlab): an item is an issue when its probability for the "
        "other class clears that class's own threshold; ranked by self-confidence, lowest first."
    )
    order = 20
    labels = base.LabelUse.BINARY
    params = (
        base.min_confidence_param("Further cut on P(other class); none by default.", default=None),
    )

    def find(self, inp: base.ModeInput) -> list[base.Disagreement]:
        """Cleanlab's label issues, each ranked by its position in cleanlab's order."""
        # Imported here: cleanlab pulls in a large stack that the other modes do not need.
        from cleanlab.filter import find_label_issues

        items, detector = inp.labelled, inp.detectors[0]
        p_all = inp.probabilities(detector)
        scored = np.flatnonzero(~np.isnan(p_all))
        y = items.y[scored].astype(np.int64)
        if np.unique(y).size < 2:
            raise InvalidInput("cleanlab mode needs both classes among the scored items")
        p = p_all[scored]
        pred_probs = np.column_stack([1.0 - p, p])
        # Confident learning: an item is an issue when it is counted off the diagonal of the
        # confident joint, i.e. its probability for another class clears that class's own
        # threshold (the mean self-confidence of the class).
        ranked = find_label_issues(
            y,
            pred_probs,
            filter_by="confident_learning",
            return_indices_ranked_by="self_confidence",
            n_jobs=1,
        )
        cut = inp.params["min_confidence"]
        out = []
        for position, j in enumerate(ranked):
            i = int(scored[j])
            other = float(pred_probs[j, 1 - y[j]])
            if cut is not None and other < float(cut):
                continue
            out.append(
                base.Disagreement(
                    int(items.instance_ids[i]),
                    items.external_ids[i],
                    items.values[i],
                    float(p[j]),
                    other,
                    "confident learning: "
                    f"{detector} gives P({items.target.other(items.values[i])})"
                    f" = {other:.3f} against label {items.values[i]}",
                    (float(position),),
                )
            )
        return out
