"""What a mode reads, as methods of its input: probabilities, judgments, answers, items' labels.

A mode module holds its ranking and declares what it needs (:mod:`.base`); every read of the
store goes through :class:`ModeInput`, so a mode never holds a session.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.answer_matrix import AnswerMatrix, load_answers
from app.services.evidence.judge_scores import Verdict, judge_orders
from app.services.evidence.labels import current_label_subquery, is_latest_original
from app.services.evidence.scores import benchmark_scores
from app.services.metrics.report import LabelledItems, detector_scores, get_detector
from app.tables import Benchmark, Detector, Instance, LabelEvent, Score

__all__ = [
    "ModeInput",
    "ParamValue",
    "against_label",
    "benchmark_probabilities",
    "check_probabilities",
    "instance_info",
    "judgments_by_order",
    "labelled_probabilities",
    "others_against_label",
]

ParamValue = float | int | str
"""The value of a mode parameter once parsed (its declared kind says which)."""

# Instance ids per query: PostgreSQL refuses more than 65,535 bound parameters.
ID_CHUNK = 5000


def check_probabilities(name: str, p: NDArray[np.float64], where: str) -> None:
    """Raise :class:`InvalidInput` unless ``p`` has a finite score and all lie in [0, 1].

    Parameters
    ----------
    name : str
        Detector name, for the message.
    p : ndarray of float64, shape (n_items,)
        Scores, NaN where the detector has none.
    where : str
        What the scores cover, for the message.

    """
    finite = p[~np.isnan(p)]
    if finite.size == 0:
        raise InvalidInput(f"detector {name!r} has no scores on {where}")
    if finite.min() < 0.0 or finite.max() > 1.0:
        raise InvalidInput(
            f"detector {name!r} scores are not probabilities in [0, 1]; disagreement modes "
            "read them as P(positive class)"
        )


def labelled_probabilities(
    session: Session, name: str, items: LabelledItems
) -> NDArray[np.float64]:
    """Detector ``name``'s P(positive class) per labelled item, checked.

    Returns
    -------
    ndarray of float64, shape (n_items,)
        NaN where the detector has no score.

    """
    p = detector_scores(session, get_detector(session, name), items)
    check_probabilities(name, p, "the labelled items")
    return p


def benchmark_probabilities(session: Session, bench: Benchmark, name: str) -> dict[int, float]:
    """Detector ``name``'s scores on every instance of ``bench`` it scored, checked.

    Returns ``{instance_id: score}``; unscored instances and null scores are left out.
    """
    detector = get_detector(session, name)
    rows = session.execute(benchmark_scores(detector.id, bench.id))
    scores = {int(iid): float(score) for iid, score in rows if score is not None}
    check_probabilities(
        name, np.fromiter(scores.values(), dtype=np.float64, count=len(scores)), bench.name
    )
    return scores


def judgments_by_order(
    session: Session, bench: Benchmark, judge: str
) -> dict[int, dict[str, Verdict]]:
    """Judge ``judge``'s judgments on ``bench`` as ``{instance_id: {order: judgment}}``."""
    detector = get_detector(session, judge)
    return judge_orders(session, bench.id, [detector.id]).get(detector.id, {})


def against_label(items: LabelledItems, p: NDArray[np.float64]) -> NDArray[np.float64]:
    """The probability each item belongs to the class opposite to its label.

    Parameters
    ----------
    items : LabelledItems
        The labelled items (``items.y`` is 1 for the positive class).
    p : ndarray of float64, shape (n_items,)
        P(positive class), NaN where unscored.

    Returns
    -------
    ndarray of float64, shape (n_items,)
        NaN where unscored.

    """
    return np.where(items.y == 1, 1.0 - p, p)


def others_against_label(
    session: Session, bench: Benchmark, items: LabelledItems, exclude: Collection[str]
) -> NDArray[np.float64]:
    """Mean P(class opposite to the label) of the benchmark's other probability detectors.

    The secondary order of the confidence-ranked modes: among items one detector contradicts
    equally (often at a saturated 1.000), those the other detectors also doubt come first.
    Detectors whose scores are not probabilities are skipped.

    Parameters
    ----------
    session : Session
        The caller's session (read only).
    bench : Benchmark
        The benchmark.
    items : LabelledItems
        The labelled items.
    exclude : collection of str
        Detectors left out (the ones the mode ranks by).

    Returns
    -------
    ndarray of float64, shape (n_items,)
        NaN where no other detector scored the item.

    """
    names = session.scalars(
        select(Detector.name)
        .where(
            Detector.id.in_(
                select(Score.detector_id)
                .join(Instance, Instance.id == Score.instance_id)
                .where(Instance.benchmark_id == bench.id)
                .distinct()
            )
        )
        .order_by(Detector.name)
    )
    columns = []
    for name in names:
        if name in exclude:
            continue
        p = detector_scores(session, get_detector(session, name), items)
        finite = p[~np.isnan(p)]
        if finite.size and finite.min() >= 0.0 and finite.max() <= 1.0:
            columns.append(against_label(items, p))
    if not columns:
        return np.full(items.instance_ids.size, np.nan)
    stacked = np.stack(columns)
    counts = (~np.isnan(stacked)).sum(axis=0)
    sums = np.nansum(stacked, axis=0)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def instance_info(
    session: Session, bench: Benchmark, instance_ids: Collection[int], label: str
) -> dict[int, tuple[str, str | None]]:
    """``{instance_id: (external_id, current value of label or None)}`` for ids of ``bench``.

    Read in chunks of :data:`ID_CHUNK` ids within the benchmark, so any number of ids works on
    every dialect.
    """
    ids = list(instance_ids)
    out: dict[int, tuple[str, str | None]] = {}
    for start in range(0, len(ids), ID_CHUNK):
        q = select(Instance.id, Instance.external_id, current_label_subquery(label)).where(
            Instance.benchmark_id == bench.id, Instance.id.in_(ids[start : start + ID_CHUNK])
        )
        out.update({iid: (ext, value) for iid, ext, value in session.execute(q)})
    return out


@dataclass(frozen=True)
class ModeInput:
    """What a mode reads: the benchmark, its detectors, the label set and its parameters.

    ``items`` holds the labelled items (binary target) for binary-label modes, else ``None``;
    ``params`` holds every declared parameter's effective value (``None`` if unset and
    without a default). The reads are methods, in the caller's ``session``.
    """

    session: Session
    bench: Benchmark
    detectors: list[str]
    label: str
    items: LabelledItems | None
    params: Mapping[str, ParamValue | None]

    @property
    def labelled(self) -> LabelledItems:
        """The labelled items (binary modes only)."""
        assert self.items is not None, "the mode does not declare LabelUse.BINARY"
        return self.items

    def number(self, name: str) -> float:
        """The value of numeric parameter ``name`` (set or defaulted)."""
        value = self.params[name]
        assert isinstance(value, int | float), f"{name} has no value"
        return float(value)

    def require_detector(self, name: str) -> None:
        """Refuse an unknown detector now (``NotFound`` naming it)."""
        get_detector(self.session, name)

    def probabilities(self, name: str) -> NDArray[np.float64]:
        """Detector ``name``'s P(positive class) per labelled item, checked.

        Returns
        -------
        ndarray of float64, shape (n_items,)
            NaN where the detector has no score.

        """
        return labelled_probabilities(self.session, name, self.labelled)

    def others_against_label(self, exclude: Collection[str]) -> NDArray[np.float64]:
        """Mean P(class opposite to the label) of the other probability detectors.

        Returns
        -------
        ndarray of float64, shape (n_items,)
            NaN where no detector outside ``exclude`` scored the item.

        """
        return others_against_label(self.session, self.bench, self.labelled, exclude)

    def scores(self, name: str) -> dict[int, float]:
        """Detector ``name``'s probabilities on every instance it scored (``{id: score}``)."""
        return benchmark_probabilities(self.session, self.bench, name)

    def judgments(self, judge: str) -> dict[int, dict[str, Verdict]]:
        """Judge ``judge``'s judgments as ``{instance_id: {order: judgment}}``."""
        return judgments_by_order(self.session, self.bench, judge)

    def answers(self) -> AnswerMatrix:
        """The models' answers on the benchmark, with the label set's current values."""
        return load_answers(self.session, self.bench, label=self.label)

    def label_values(self, name: str) -> dict[int, str]:
        """``{instance_id: current original value}`` of label set ``name`` on the benchmark.

        Empty when the benchmark has no such label set (instances without a value are left
        out).
        """
        # One anti-join over the label set's events (is_latest_original), not a correlated
        # subquery per instance: a benchmark without the set costs an empty index range.
        rows = self.session.execute(
            select(LabelEvent.instance_id, LabelEvent.value)
            .join(Instance, Instance.id == LabelEvent.instance_id)
            .where(
                Instance.benchmark_id == self.bench.id,
                LabelEvent.label_name == name,
                is_latest_original(),
            )
        )
        return {int(iid): str(v) for iid, v in rows if v is not None}

    def items_info(self, instance_ids: Collection[int]) -> dict[int, tuple[str, str | None]]:
        """``{instance_id: (external_id, current label value or None)}`` for these ids."""
        return instance_info(self.session, self.bench, instance_ids, self.label)
