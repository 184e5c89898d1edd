"""The metric registry: every detector metric declared once, with its direction, needs and kernel.

The bootstrap engine, the summaries, the services, the JSON rows and every metric table read
this module; adding a metric is one :class:`Metric` in :data:`REGISTRY` (and its kernel).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from app.stats import _kernels, _validate

__all__ = [
    "ANSWER_METRICS",
    "ECE_BINS",
    "HIGHER_IS_BETTER",
    "INTERVAL",
    "METRICS",
    "REGISTRY",
    "REPORTED",
    "TOP_K",
    "Additive",
    "Categorical",
    "Metric",
    "Need",
    "Ranked",
    "StratifiedRanked",
    "TopK",
    "applicable",
    "get_metric",
    "scores_are_probabilities",
]

Totals = Callable[
    [NDArray[np.bool_], NDArray[np.float64], float, NDArray[np.intp], int], NDArray[np.float64]
]
"""``(y (n,), p (n,), threshold, units (n,), n_units) -> (n_units, m)``: per-unit totals of the
m item values a metric needs (items of unit ``u`` are those with ``units == u``)."""

ItemValues = Callable[[NDArray[np.bool_], NDArray[np.float64], float], NDArray[np.float64]]
"""``(y (n,), p (n,), threshold) -> (n,)``: one value per item."""


def _first_column(means: NDArray[np.float64]) -> NDArray[np.float64]:
    return means[:, 0]


@dataclass(frozen=True)
class Additive:
    """A metric that is a function of weighted means of per-item columns.

    A resample's means are ``(multiplicities @ group totals) / (multiplicities @ group
    sizes)``, so the engine needs each column's per-group totals once and one product per
    resample. ``totals`` builds those (n_units, m) totals of the item values; ``reduce`` maps
    the (c, m) means of c resamples to the (c,) metric values (NaN where a resample has no
    weight).
    """

    totals: Totals
    reduce: Callable[[NDArray[np.float64]], NDArray[np.float64]] = _first_column


@dataclass(frozen=True)
class Ranked:
    """A metric computed from a detector's ranking sums (:class:`app.stats._kernels.RankSums`).

    ``precision`` says whether the sums must include the average-precision term.
    """

    value: Callable[[_kernels.RankSums], NDArray[np.float64]]
    precision: bool = False


@dataclass(frozen=True)
class StratifiedRanked:
    """A ranking metric pooled over strata: ``value(twice_concordant, pairs)``, each (c,)."""

    value: Callable[[NDArray[np.float64], NDArray[np.float64]], NDArray[np.float64]]


@dataclass(frozen=True)
class TopK:
    """Precision or recall among the ``k`` highest-scored items (:class:`_kernels.TopPlan`).

    Ties at the cut are shared: the expected value when they are broken at random.
    """

    k: int
    recall: bool = False


CategoricalColumns = Callable[[NDArray[np.intp], NDArray[np.intp], int], NDArray[np.float64]]
"""``(labels (n,), answers (n,), n_classes) -> (n, m)``: per-item values of an answer metric."""


@dataclass(frozen=True)
class Categorical:
    """A metric of categorical answers against multi-class labels, from weighted item means.

    Labels are class indices ``0 .. K - 1``; an answer is a class index or negative (an answer
    naming no class). Like :class:`Additive`, ``columns`` builds the (n, m) item values and
    ``reduce`` maps the (c, m) means of c resamples to (c,) values.
    """

    columns: CategoricalColumns
    reduce: Callable[[NDArray[np.float64]], NDArray[np.float64]] = _first_column


Kernel = Additive | Ranked | StratifiedRanked | TopK | Categorical


class Need(enum.Enum):
    """What a metric needs besides binary labels."""

    SCORES = "scores"
    """A detector's scores (without it the metric describes the labels alone)."""
    PROBABILITIES = "probabilities"
    """Scores that all lie in [0, 1]."""
    STRATA = "strata"
    """A stratum per item, such as the judge's AB choice."""
    THRESHOLD = "threshold"
    """A decision threshold (a score at or above it predicts the positive class)."""
    RANKING = "ranking"
    """Scores that rank items for review, such as a label-error ranker's (the top k is read)."""
    ANSWERS = "answers"
    """A model's categorical answers against a multi-class label (instead of scores)."""
    CLASSES = "classes"
    """Answers that name classes (a choice item's options), not graded free text."""


@dataclass(frozen=True)
class Metric:
    """One metric: how it is named, read and computed.

    Attributes
    ----------
    name : str
        Key in the bootstrap results and the JSON rows (``name`` and ``name_ci``).
    title : str
        Column header of the metric tables.
    higher_is_better : bool
        Direction; decides which detector "wins" a resample of a paired difference.
    kernel : Additive, Ranked or StratifiedRanked
        The vectorised computation for many resamples at once.
    needs : frozenset of Need
        Inputs beyond the labels.
    interval : bool
        Reported with a group-bootstrap interval; ``False`` for a point (prevalence).
    reported : bool
        A column of the metric matrix and of ``appellate metrics --json`` rows.
    headline : bool
        Shown in compact before/after tables (the queue's "before you accept").

    """

    name: str
    title: str
    higher_is_better: bool
    kernel: Kernel
    needs: frozenset[Need] = frozenset({Need.SCORES})
    interval: bool = True
    reported: bool = True
    headline: bool = False

    @property
    def per_detector(self) -> bool:
        """Whether the metric depends on a detector's scores (prevalence does not)."""
        return Need.SCORES in self.needs

    @property
    def on_answers(self) -> bool:
        """Whether the metric reads categorical answers rather than scores."""
        return Need.ANSWERS in self.needs


# Kernels of the additive metrics: the per-group totals of the item values they need.


def _per_item(value: ItemValues) -> Totals:
    """The :data:`Totals` of one item value per item."""

    def totals(
        y: NDArray[np.bool_],
        p: NDArray[np.float64],
        threshold: float,
        units: NDArray[np.intp],
        n_units: int,
    ) -> NDArray[np.float64]:
        return np.bincount(units, weights=value(y, p, threshold), minlength=n_units)[:, None]

    return totals


def _positives(
    y: NDArray[np.bool_], p: NDArray[np.float64], threshold: float
) -> NDArray[np.float64]:
    return y.astype(np.float64)


def _squared_errors(
    y: NDArray[np.bool_], p: NDArray[np.float64], threshold: float
) -> NDArray[np.float64]:
    return (p - y) ** 2


def _hits(y: NDArray[np.bool_], p: NDArray[np.float64], threshold: float) -> NDArray[np.float64]:
    return ((p >= threshold) == y).astype(np.float64)


ECE_BINS = 10
"""Equal-width probability bins of expected calibration error (the last one closed)."""


def _calibration_gaps(
    y: NDArray[np.bool_],
    p: NDArray[np.float64],
    threshold: float,
    units: NDArray[np.intp],
    n_units: int,
) -> NDArray[np.float64]:
    # ECE = sum over bins of |sum of (p - y) in the bin| / n: the bin share times
    # |mean p - mean y|. One column per occupied bin (an empty one adds nothing, ever), all
    # from one count over (unit, bin) cells: no (n, bins) array of mostly zeros.
    index, _ = _kernels.equal_width_bins(p, ECE_BINS)
    occupied = np.bincount(index, minlength=ECE_BINS) > 0
    column = (np.cumsum(occupied) - 1)[index]
    width = int(occupied.sum())
    cells = np.bincount(units * width + column, weights=p - y, minlength=n_units * width)
    return cells.reshape(n_units, width)


def _sum_of_gaps(means: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.abs(means).sum(axis=1)


TOP_K: tuple[int, ...] = (50, 100, 200)
"""The k of precision@k and recall@k (what label-error studies report)."""


def _correct(labels: NDArray[np.intp], answers: NDArray[np.intp], n_classes: int) -> NDArray:
    return (answers == labels).astype(np.float64)[:, None]


def _class_counts(labels: NDArray[np.intp], answers: NDArray[np.intp], n_classes: int) -> NDArray:
    # Per class k: true positives, false positives (answered k, label other) and false
    # negatives (label k, answered other or no class); their weighted means give F1_k.
    out = np.empty((labels.size, 3 * n_classes))
    for k in range(n_classes):
        said, truth = answers == k, labels == k
        out[:, 3 * k] = said & truth
        out[:, 3 * k + 1] = said & ~truth
        out[:, 3 * k + 2] = truth & ~said
    return out


def _macro_f1(means: NDArray[np.float64]) -> NDArray[np.float64]:
    # Mean F1 over the classes that occur (as a label or an answer) in each resample, as
    # scikit-learn's f1_score(average="macro") over the classes present.
    tp, fp, fn = means[:, 0::3], means[:, 1::3], means[:, 2::3]
    occurs = (tp + fp + fn) > 0
    f1 = np.divide(2 * tp, 2 * tp + fp + fn, out=np.zeros_like(tp), where=occurs)
    return np.divide(
        f1.sum(axis=1),
        occurs.sum(axis=1),
        out=np.full(tp.shape[0], np.nan),
        where=occurs.any(axis=1),
    )


def _needs(*needs: Need) -> frozenset[Need]:
    return frozenset({Need.SCORES, *needs})


_DEFINITIONS: tuple[Metric, ...] = (
    Metric(
        "prevalence",
        "Prevalence",
        True,
        Additive(_per_item(_positives)),
        frozenset(),
        interval=False,
    ),
    Metric("auroc", "AUROC", True, Ranked(_kernels.auroc_from), headline=True),
    Metric("auprc", "AUPRC", True, Ranked(_kernels.average_precision_from, precision=True)),
    Metric(
        "brier",
        "Brier",
        False,
        Additive(_per_item(_squared_errors)),
        _needs(Need.PROBABILITIES),
        headline=True,
    ),
    Metric(
        "accuracy",
        "Accuracy",
        True,
        Additive(_per_item(_hits)),
        _needs(Need.THRESHOLD),
        reported=False,
    ),
    Metric(
        "choice_matched_auroc",
        "Choice-matched AUROC",
        True,
        StratifiedRanked(_kernels.choice_matched_from),
        _needs(Need.STRATA),
    ),
    Metric(
        "ece", "ECE", False, Additive(_calibration_gaps, _sum_of_gaps), _needs(Need.PROBABILITIES)
    ),
    *(
        Metric(f"{what}_at_{k}", f"{title}@{k}", True, TopK(k, recall), _needs(Need.RANKING))
        for what, title, recall in (("precision", "P", False), ("recall", "R", True))
        for k in TOP_K
    ),
    Metric("answer_accuracy", "Accuracy", True, Categorical(_correct), frozenset({Need.ANSWERS})),
    Metric(
        "macro_f1",
        "Macro-F1",
        True,
        Categorical(_class_counts, _macro_f1),
        frozenset({Need.ANSWERS, Need.CLASSES}),
    ),
)

REGISTRY: dict[str, Metric] = {metric.name: metric for metric in _DEFINITIONS}
"""Every metric by name, in the order tables and JSON rows show them."""

METRICS: tuple[str, ...] = tuple(REGISTRY)
"""Metric names ``group_bootstrap`` understands."""

HIGHER_IS_BETTER: dict[str, bool] = {m.name: m.higher_is_better for m in _DEFINITIONS}
"""Direction of each metric, used to say which detector "beats" the other in a resample."""

REPORTED: tuple[Metric, ...] = tuple(m for m in _DEFINITIONS if m.reported and not m.on_answers)
"""The metric matrix's metrics of scores, in column order."""

INTERVAL: tuple[Metric, ...] = tuple(m for m in REPORTED if m.interval)
"""Reported per-detector metrics with an interval; also those of paired differences."""

ANSWER_METRICS: tuple[Metric, ...] = tuple(m for m in _DEFINITIONS if m.on_answers)
"""The metrics of models' categorical answers against a multi-class label set."""


def get_metric(name: str) -> Metric:
    """The metric called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; choose from {list(METRICS)}") from None


def scores_are_probabilities(*scores: NDArray[np.float64]) -> bool:
    """Whether every score of every given (finite) array lies in [0, 1]."""
    return all(_validate.is_probability(p) for p in scores)


def applicable(
    metrics: Iterable[Metric], *scores: NDArray[np.float64], strata: bool, ranking: bool = False
) -> tuple[Metric, ...]:
    """The metrics whose needs the given detectors' scores and strata meet.

    Parameters
    ----------
    metrics : iterable of Metric
        Candidates, in the order to keep.
    *scores : ndarray of float64, shape (n,)
        Each detector's finite scores; metrics that need probabilities apply only when all
        of them lie in [0, 1].
    strata : bool
        Whether a stratum per item is at hand.
    ranking : bool
        Whether the detectors rank items for review (label-error rankers): the top-k metrics.

    Returns
    -------
    tuple of Metric

    """
    probabilities = scores_are_probabilities(*scores)
    return tuple(
        m
        for m in metrics
        if (probabilities or Need.PROBABILITIES not in m.needs)
        and (strata or Need.STRATA not in m.needs)
        and (ranking or Need.RANKING not in m.needs)
    )
