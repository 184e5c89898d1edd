"""``label-errors`` mode: items ranked by a label-error ranker, with the models' votes beside."""

from __future__ import annotations

from collections import Counter

from app.services.disagreements.modes import base
from app.services.evidence.answer_matrix import ANSWER_KINDS


@base.register_mode
class LabelErrorsMode(base.DisagreementMode):
    """The items a label-error ranker (``ranker:*``) finds most suspect, highest score first.

    Each item carries its evidence: the label, how many models gave each answer, and the
    plurality answer. ``score`` and ``confidence`` are the ranker's score; ties by external id.
    """

    name = "label-errors"
    title = "Label errors"
    help = (
        "Items ranked by a label-error ranker (ranker:*), most suspect first, with how many "
        "models gave each answer."
    )
    order = 70
    benchmark_kinds = ANSWER_KINDS

    def find(self, inp: base.ModeInput) -> list[base.Disagreement]:
        """Every item the ranker scored, with the models' answers as evidence."""
        ranker = inp.detectors[0]
        scores = inp.scores(ranker)
        matrix = inp.answers()
        voters = [j for j, probs in enumerate(matrix.probabilities) if not probs]
        out = []
        for row, iid in enumerate(matrix.instance_ids.tolist()):
            score = scores.get(iid)
            if score is None:
                continue
            votes = Counter(a for a in (matrix.answers[row][j] for j in voters) if a is not None)
            label = matrix.labels[row]
            top, top_n = votes.most_common(1)[0] if votes else (None, 0)
            shown = ", ".join(f"{answer} {n}" for answer, n in sorted(votes.items()))
            reason = f"{ranker} gives {score:.3f}; label {label}; answers {shown or 'none'}" + (
                f"; plurality {top} ({top_n} of {sum(votes.values())})" if top else ""
            )
            evidence = {
                "votes": dict(sorted(votes.items())),
                "plurality": top,
                "answered": sum(votes.values()),
            }
            out.append(
                base.Disagreement(
                    iid,
                    matrix.external_ids[row],
                    label,
                    score,
                    score,
                    reason,
                    (-score,),
                    evidence,
                )
            )
        return out
