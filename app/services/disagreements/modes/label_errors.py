"""``label-errors`` mode: items ranked by a label-error ranker, with the models' votes beside.

The ranker's score orders the list. It saturates (every model against the label gives the
consensus ranker 1.0 on hundreds of MMLU items), so ties are broken for the reader, not for the
ranker: first by the strength of the plurality against the label (the share of the answering
models that agree on one other option), then spread round-robin over the items' groups (one
item of each subject before a second of any). The ranker's scores, and every number computed
from them (AUPRC, precision at k: :mod:`app.services.metrics.rankers`), are untouched: the
tie-break only orders this list.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

from app.natural_sort import natural_key
from app.services.disagreements.modes import base
from app.services.evidence.answer_matrix import ANSWER_KINDS

__all__ = ["VERDICT_LABEL", "LabelErrorsMode", "plurality_against"]

VERDICT_LABEL = "errata"
"""The label set holding the experts' verdict on an item (``ok`` or the error type): MMLU-Redux
imports it under this name (``app.ingest.mmlu_redux.ERRATA_LABEL``)."""


def plurality_against(votes: Counter[str], label: str | None) -> tuple[str | None, float]:
    """The option most models chose other than ``label``, and the share of answers it got.

    Ties between options go to the first in alphabetical order (a stable choice); the share
    is of every answer, the label's included, so 3 of 4 models on one other option (0.75)
    outranks 2 of 4 on each of two (0.5). ``(None, 0.0)`` when no model answered otherwise.
    """
    answered = sum(votes.values())
    others = sorted((-n, answer) for answer, n in votes.items() if answer != label)
    if not others or not answered:
        return None, 0.0
    n, answer = others[0]
    return answer, -n / answered


@base.register_mode
class LabelErrorsMode(base.DisagreementMode):
    """The items a label-error ranker (``ranker:*``) finds most suspect, highest score first.

    Each item carries its evidence: the label, how many models gave each answer, the
    plurality answer and, where the benchmark has an ``errata`` label set, the experts'
    verdict. ``score`` and ``confidence`` are both the ranker's score. Ties go by the share of
    the answers on the strongest other option (higher first), then round-robin over groups
    (each group's items by natural external-id order; groups by name within a round).
    """

    name = "label-errors"
    title = "Label errors"
    help = (
        "Items ranked by a label-error ranker (ranker:*), most suspect first, with how many "
        "models gave each answer; ties go to the stronger plurality on another option, then "
        "spread across groups."
    )
    order = 70
    benchmark_kinds = ANSWER_KINDS
    # 1: the plurality and round-robin tie-break (kept lists of the old order are not served).
    ranking_revision = 1

    def find(self, inp: base.ModeInput) -> list[base.Disagreement]:
        """Every item the ranker scored, with the models' answers as evidence."""
        ranker = inp.detectors[0]
        scores = inp.scores(ranker)
        matrix = inp.answers()
        verdicts = inp.label_values(VERDICT_LABEL)
        voters = [j for j, probs in enumerate(matrix.probabilities) if not probs]
        found: list[tuple[base.Disagreement, str]] = []
        for row, iid in enumerate(matrix.instance_ids.tolist()):
            score = scores.get(iid)
            if score is None:
                continue
            votes = Counter(a for a in (matrix.answers[row][j] for j in voters) if a is not None)
            label = matrix.labels[row]
            top, top_n = votes.most_common(1)[0] if votes else (None, 0)
            other, share = plurality_against(votes, label)
            shown = ", ".join(f"{answer} {n}" for answer, n in sorted(votes.items()))
            verdict = verdicts.get(iid)
            reason = (
                f"{ranker} gives {score:.3f}; label {label}; answers {shown or 'none'}"
                + (f"; plurality {top} ({top_n} of {sum(votes.values())})" if top else "")
                + (f"; experts: {verdict}" if verdict is not None else "")
            )
            evidence: dict[str, object] = {
                "votes": dict(sorted(votes.items())),
                "plurality": top,
                "answered": sum(votes.values()),
                "against": other,
                "against_share": share,
            }
            if verdicts:
                evidence["verdict"] = verdict
            item = base.Disagreement(
                iid, matrix.external_ids[row], label, score, score, reason, (-score, -share),
                evidence,
            )  # fmt: skip
            found.append((item, matrix.groups[row]))
        return _spread(found)


def _spread(found: list[tuple[base.Disagreement, str]]) -> list[base.Disagreement]:
    """``found`` with rank keys that spread each block of ties round-robin over the groups.

    Within a block of equal ``(score, share)`` keys, an item's round is its position in its
    group (natural external-id order); a round lists its groups by name. Ties within a
    group of one round cannot happen, so the order is total and deterministic.
    """
    members: dict[tuple[float, ...], dict[str, list[base.Disagreement]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for item, group in found:
        members[item.rank][group].append(item)
    groups = {g: float(i) for i, g in enumerate(sorted({group for _, group in found}))}
    out = []
    for key, by_group in members.items():
        for group, items in by_group.items():
            items.sort(key=lambda d: (natural_key(d.external_id), d.external_id))
            out += [replace(d, rank=(*key, float(r), groups[group])) for r, d in enumerate(items)]
    return out
