"""Derived from two-order judgments: ``flip:<judge>`` labels and each judge's pair scores.

Only a detector that judged pairs in both orders is a judge here. Reward models score each
response alone: the importer stores their comparison in both orders, but that is one pair of
rewards read twice, so they get neither flip labels nor derived scores (their own scores come
from the rewards).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.evidence.judge_scores import judge_orders, store_judge_scores
from app.services.evidence.labels import append_labels, latest_event_ids
from app.tables import Choice, Detector, Instance, LabelEvent, Order

FLIP_PREFIX = "flip:"
FLIP_SOURCE = "derived"
# Detector kinds that score responses independently (see the module docstring).
INDEPENDENT_SCORER_KINDS = frozenset({"reward_model"})
_BOTH_ORDERS = frozenset({Order.AB.value, Order.BA.value})


@dataclass(frozen=True)
class FlipSummary:
    """What one recomputation found and changed, summed over judges.

    ``events`` counts flip label events appended, ``scores`` derived score rows added, updated
    or deleted (:func:`app.services.evidence.judge_scores.store_judge_scores`).
    """

    judges: int
    retained: int
    flips: int
    events: int
    scores: int = 0

    @property
    def changed(self) -> bool:
        """Whether labels or scores changed (the benchmark's data version must move)."""
        return bool(self.events or self.scores)


def is_two_order_judge(kind: str, orders: Collection[str]) -> bool:
    """Whether a detector of ``kind`` that judged in ``orders`` gets flips, scores and a summary.

    ``orders`` are the presentation orders of its judgments (of one pair or of a benchmark).
    """
    return kind not in INDEPENDENT_SCORER_KINDS and set(orders) >= _BOTH_ORDERS


def flip_label_name(judge_name: str) -> str:
    """The label set holding the flips of the judge (detector) called ``judge_name``."""
    return f"{FLIP_PREFIX}{judge_name}"


def flip_value(choice_ab: str | None, choice_ba: str | None) -> str | None:
    """The flip label of one pair from the identities chosen in the AB and BA orders.

    ``"1"`` if they differ (a tie against A or B is a flip), ``"0"`` if they are equal (tie
    against tie is not), ``None`` if either judgment is missing or invalid: the pair is not
    retained.
    """
    if choice_ab is None or choice_ba is None:
        return None
    if Choice.invalid in (choice_ab, choice_ba):
        return None
    return "1" if choice_ab != choice_ba else "0"


def recompute_flips(
    session: Session, benchmark_id: int, detector_ids: Collection[int] | None = None
) -> FlipSummary:
    """Bring every ``flip:<judge>`` label set and judge score of a benchmark up to date.

    A judge counts when it has at least one AB and one BA judgment on the benchmark and is not
    a reward model (:func:`is_two_order_judge`). Label events are appended only where the
    derived value changes; a pair that stopped being retained (an order became invalid or
    disappeared, even every judgment of the judge) gets a null-valued retraction event. The
    judge's derived scores (P(A is better)) are refreshed the same way.

    Parameters
    ----------
    session
        The caller's session; flushed, never committed.
    benchmark_id
        The benchmark whose pairs are relabelled.
    detector_ids
        Restrict the recomputation to these judges (all judges when None).

    """
    choices = judge_orders(session, benchmark_id, detector_ids, (Order.AB.value, Order.BA.value))

    if detector_ids is None:
        # Judges whose judgments are all gone still have labels that must be retracted.
        wanted = set(choices) | _judges_with_flip_labels(session, benchmark_id)
    else:
        wanted = set(detector_ids)
    q_names = select(Detector.id, Detector.name).where(
        Detector.id.in_(sorted(wanted)), Detector.kind.not_in(INDEPENDENT_SCORER_KINDS)
    )
    names = {detector_id: name for detector_id, name in session.execute(q_names)}
    judges = retained = flips = events = scores = 0
    for detector_id in sorted(names):
        by_instance = choices.get(detector_id, {})
        orders = {o for per in by_instance.values() for o in per}
        # A judge without both orders derives nothing: every value is None, which appends only
        # retractions of labels derived earlier (and deletes its derived scores).
        judges += orders >= _BOTH_ORDERS
        label = flip_label_name(names[detector_id])
        values: dict[int, str | None] = {}
        reasons: dict[int, str] = {}
        for instance_id, per in by_instance.items():
            ab, ba = (per[o].choice if o in per else None for o in (Order.AB.value, Order.BA.value))
            values[instance_id] = flip_value(ab, ba)
            reasons[instance_id] = f"AB chose {ab or 'nothing'}, BA chose {ba or 'nothing'}"
        for instance_id in _labelled_instances(session, benchmark_id, label):
            if instance_id not in values:
                values[instance_id] = None
                reasons[instance_id] = "no AB/BA judgments any more"
        retained += sum(v is not None for v in values.values())
        flips += sum(v == "1" for v in values.values())
        events += append_labels(
            session, label, values, source=FLIP_SOURCE, author="flips", reasons=reasons
        )
        scores += store_judge_scores(session, benchmark_id, detector_id, by_instance)
    session.flush()
    return FlipSummary(judges, retained, flips, events, scores)


def _labelled_instances(session: Session, benchmark_id: int, label_name: str) -> list[int]:
    """Instances of the benchmark whose latest ``label_name`` event has a value."""
    q = (
        select(LabelEvent.instance_id)
        .join(Instance, Instance.id == LabelEvent.instance_id)
        .where(
            Instance.benchmark_id == benchmark_id,
            LabelEvent.id.in_(latest_event_ids(label_name)),
            LabelEvent.value.is_not(None),
        )
    )
    return list(session.scalars(q))


def _judges_with_flip_labels(session: Session, benchmark_id: int) -> set[int]:
    """Detectors named by a ``flip:*`` label set on the benchmark."""
    q = (
        select(LabelEvent.label_name)
        .join(Instance, Instance.id == LabelEvent.instance_id)
        .where(Instance.benchmark_id == benchmark_id, LabelEvent.label_name.startswith(FLIP_PREFIX))
        .distinct()
    )
    names = [name.removeprefix(FLIP_PREFIX) for name in session.scalars(q)]
    if not names:
        return set()
    return set(session.scalars(select(Detector.id).where(Detector.name.in_(names))))
