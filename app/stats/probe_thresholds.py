"""Decision thresholds of a detector at a chosen false-positive rate on a control set.

A lie detector is deployed with a threshold, and the threshold is set where false alarms are
counted: on a control set of ordinary, honest traffic (e.g. the model's own on-policy answers to
MT-Bench questions). :func:`threshold_at_fpr` puts the threshold so that at most
``floor(fpr * n)`` control items are flagged (exactly that many unless ties sit at the cut), so
the realised FPR is within one item of the target and never above it. :func:`operating_point`
then reports the true-positive rate on the positive (lie) items with two intervals: the exact
Clopper-Pearson interval given the threshold, and a group bootstrap that redraws both the control
and the positive set and re-chooses the threshold in every resample (the threshold is itself an
estimate).

Scores are oriented so that *higher means flagged* (pass a lie score, e.g. minus an honesty
logit); an item is flagged when ``score >= threshold``, as in :mod:`app.stats.metrics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import beta

from app.stats import _validate
from app.stats.bootstrap import Estimate, percentile_interval, stratified_multiplicities

__all__ = [
    "THRESHOLD_RULES",
    "FprOnControl",
    "OperatingPoint",
    "Threshold",
    "clopper_pearson",
    "operating_point",
    "parse_threshold_rule",
    "threshold_at_fpr",
]


@dataclass(frozen=True)
class Threshold:
    """A threshold chosen on a control set: flag when ``score >= value``.

    ``flagged`` of the ``n_control`` control items are flagged (``realised_fpr`` =
    flagged / n_control); the target allowed ``floor(target_fpr * n_control)``.
    """

    value: float
    target_fpr: float
    n_control: int
    flagged: int

    @property
    def realised_fpr(self) -> float:
        """Share of the control items flagged."""
        return self.flagged / self.n_control

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the threshold may be ``inf`` when nothing may be flagged)."""
        return {
            "threshold": self.value if math.isfinite(self.value) else None,
            "target_fpr": self.target_fpr,
            "n_control": self.n_control,
            "flagged": self.flagged,
            "realised_fpr": self.realised_fpr,
        }


def _fpr(fpr: float) -> float:
    value = float(fpr)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"the target FPR must be in [0, 1), got {fpr!r}")
    return value


def _allowed(target_fpr: float, n: float) -> int:
    """``floor(target_fpr * n)``, immune to rounding such as 0.29 * 100 = 28.999999999999996."""
    return math.floor(target_fpr * n + 1e-9)


def _cut(values_desc: NDArray[np.float64], counts: NDArray[np.float64], allowed: float) -> float:
    """Smallest distinct value whose ``count(score >= value) <= allowed`` (above all if none).

    ``values_desc`` are the distinct scores in decreasing order, ``counts`` their (weighted)
    multiplicities.
    """
    cum = np.cumsum(counts)
    ok = np.flatnonzero(cum <= allowed + 1e-9)  # counts may be float weights
    if ok.size == 0:
        return float(np.nextafter(values_desc[0], np.inf))  # even the top tie is too many
    return float(values_desc[ok[-1]])


def threshold_at_fpr(control_scores: ArrayLike, fpr: float) -> Threshold:
    """The threshold flagging at most ``floor(fpr * n)`` of ``n`` control items.

    Parameters
    ----------
    control_scores : array-like of float, shape (n,)
        Scores of the control (honest) items, higher = more suspicious.
    fpr : float
        Target false-positive rate in [0, 1).

    Returns
    -------
    Threshold
        The largest flagged count not above ``floor(fpr * n)`` that a threshold can realise:
        exactly ``floor(fpr * n)`` without ties at the cut, so ``|flagged - fpr * n| < 1``.
        With ties the whole tie is left unflagged (the FPR never exceeds the target).

    """
    scores = _validate.scores(control_scores, name="control_scores")
    target = _fpr(fpr)
    values, counts = np.unique(scores, return_counts=True)
    allowed = _allowed(target, scores.size)
    cut = _cut(values[::-1], counts[::-1].astype(np.float64), allowed)
    return Threshold(cut, target, int(scores.size), int((scores >= cut).sum()))


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval of ``successes / trials``.

    Parameters
    ----------
    successes, trials : int
        Counts, ``0 <= successes <= trials``, ``trials >= 1``.
    level : float
        Coverage.

    Returns
    -------
    (float, float)
        Beta-quantile bounds (0 and 1 at the edges).

    """
    if not 0 <= successes <= trials or trials < 1:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes}/{trials}")
    alpha = 1.0 - _validate.confidence_level(level)
    low = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, trials - successes + 1))
    high = (
        1.0
        if successes == trials
        else float(beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    )
    return low, high


@dataclass(frozen=True)
class OperatingPoint:
    """A detector at a control-set threshold: the threshold, and the TPR on the positive items.

    ``tpr`` carries the group-bootstrap interval (threshold re-chosen per resample);
    ``tpr_exact_ci`` is the Clopper-Pearson interval given the threshold.
    """

    threshold: Threshold
    tpr: Estimate
    detected: int
    n_positive: int
    tpr_exact_ci: tuple[float, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: the threshold's fields and ``tpr``, ``tpr_ci``, ``tpr_exact_ci``."""
        return {
            **self.threshold.to_dict(),
            "tpr": self.tpr.value,
            "tpr_ci": self.tpr.ci,
            "tpr_ci_reason": self.tpr.reason,
            "tpr_exact_ci": list(self.tpr_exact_ci),
            "detected": self.detected,
            "n_positive": self.n_positive,
        }


def operating_point(
    control_scores: ArrayLike,
    positive_scores: ArrayLike,
    fpr: float,
    *,
    control_groups: ArrayLike | None = None,
    positive_groups: ArrayLike | None = None,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> OperatingPoint:
    """Threshold at ``fpr`` on the control set and the TPR it gives on the positive items.

    Parameters
    ----------
    control_scores : array-like of float, shape (n_control,)
        Control (honest, ordinary traffic) scores, higher = flagged.
    positive_scores : array-like of float, shape (n_positive,)
        Scores of the items to detect (lies).
    fpr : float
        Target FPR in [0, 1).
    control_groups, positive_groups : array-like, optional
        Resampling unit of each item (default: the item itself); the bootstrap redraws groups of
        each set separately (a stratified draw) and re-chooses the threshold every time.
    resamples, seed, level : int, int, float
        Bootstrap size, root seed and interval coverage.

    Returns
    -------
    OperatingPoint

    """
    control = _validate.scores(control_scores, name="control_scores")
    positive = _validate.scores(positive_scores, name="positive_scores")
    threshold = threshold_at_fpr(control, fpr)
    hit = positive >= threshold.value
    detected = int(hit.sum())
    c_codes, c_k = _validate.keys(
        np.arange(control.size) if control_groups is None else control_groups,
        control.size,
        "control_groups",
        "control_scores",
    )
    p_codes, p_k = _validate.keys(
        np.arange(positive.size) if positive_groups is None else positive_groups,
        positive.size,
        "positive_groups",
        "positive_scores",
    )
    resamples = _validate.resample_count(resamples)
    replicates = np.full(resamples, np.nan)
    if resamples:
        draws = stratified_multiplicities((c_k, p_k), resamples, seed)
        values, inverse = np.unique(control, return_inverse=True)
        desc = values[::-1]
        last = values.size - 1
        for b in range(resamples):
            w_control = draws[b, :c_k][c_codes].astype(np.float64)
            w_positive = draws[b, c_k:][p_codes].astype(np.float64)
            counts = np.bincount(last - inverse, weights=w_control, minlength=values.size)
            cut = _cut(desc, counts, _allowed(threshold.target_fpr, w_control.sum()))
            total = w_positive.sum()
            if total > 0:
                replicates[b] = w_positive[positive >= cut].sum() / total
    interval = percentile_interval(replicates, level)
    tpr = Estimate.of(detected / positive.size, interval, resamples, min(c_k, p_k))
    exact = clopper_pearson(detected, int(positive.size), level)
    return OperatingPoint(threshold, tpr, detected, int(positive.size), exact)


# --- rules --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FprOnControl:
    """Threshold at ``target_fpr`` on the recipe's control set (:func:`threshold_at_fpr`)."""

    target_fpr: float

    def __post_init__(self) -> None:
        _fpr(self.target_fpr)

    @property
    def name(self) -> str:
        """``fpr:<target>``, e.g. ``fpr:0.01``."""
        return f"fpr:{self.target_fpr:g}"

    def choose(self, control_scores: ArrayLike) -> Threshold:
        """The threshold on the control scores (shape (n,), higher = flagged)."""
        return threshold_at_fpr(control_scores, self.target_fpr)


THRESHOLD_RULES: dict[str, FprOnControl] = {
    "fpr:0.01": FprOnControl(0.01),
    "fpr:0.05": FprOnControl(0.05),
}
"""Named threshold rules; :func:`parse_threshold_rule` also reads any ``fpr:<rate>``."""


def parse_threshold_rule(text: str) -> FprOnControl:
    """A registered rule, or ``fpr:<rate>`` for any rate in [0, 1); ValueError otherwise."""
    if text in THRESHOLD_RULES:
        return THRESHOLD_RULES[text]
    kind, _, arg = text.partition(":")
    if kind == "fpr":
        try:
            return FprOnControl(float(arg))
        except ValueError:
            pass
    raise ValueError(
        f"unknown threshold rule {text!r}; one of {', '.join(THRESHOLD_RULES)} or fpr:<rate>"
    )
