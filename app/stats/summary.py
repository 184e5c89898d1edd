"""JSON-ready summaries: a detector's metrics with intervals, and paired detector differences.

These dicts are what the metric matrix and ``appellate metrics --json`` print: intervals are
``[low, high]`` lists and undefined values are ``None`` (JSON ``null``), never NaN or 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from app.stats import _validate
from app.stats.bootstrap import BootstrapResult, group_bootstrap
from app.stats.registry import REGISTRY, REPORTED, applicable

__all__ = [
    "SUMMARY_METRICS",
    "difference_rows",
    "paired_difference",
    "paired_differences",
    "summarise",
]

SUMMARY_METRICS: tuple[str, ...] = tuple(m.name for m in REPORTED)
"""Metrics reported by ``summarise``, each as ``name`` and ``name_ci`` (the registry's)."""

# Metrics a paired difference can compare: those that depend on the detector.
_PAIRED: tuple[str, ...] = tuple(name for name, m in REGISTRY.items() if m.per_detector)


def summarise(
    y: ArrayLike,
    p: ArrayLike,
    groups: ArrayLike,
    choice: ArrayLike | None = None,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """A detector's metrics with group-bootstrap percentile intervals.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.
    p : array-like of float, shape (n,)
        Scores. Metrics that need probabilities (Brier) are reported only when every score
        lies in [0, 1].
    groups : array-like, shape (n,)
        Group key of each item (the bootstrap unit).
    choice : array-like, shape (n,), optional
        Stratum for the metrics that need one (choice-matched AUROC, e.g. by the judge's AB
        choice); without it they are ``None``.
    resamples : int
        Bootstrap resamples (0: point values only, intervals ``None``).
    seed : int
        Root seed of the resamples.
    level : float
        Interval coverage.

    Returns
    -------
    dict
        ``n``, ``n_groups``, and for each of ``SUMMARY_METRICS`` the value (``None`` when
        undefined or not applicable) and ``<metric>_ci`` (``[low, high]`` or ``None``);
        ``valid_resamples`` (per metric, how many resamples had the metric defined),
        ``resamples``, ``level`` and ``scores_are_probabilities``.

    Raises
    ------
    ValueError
        On invalid inputs.

    """
    labels, scores = _validate.labelled_scores(y, p)
    metrics = applicable(REPORTED, scores, strata=choice is not None)
    result = group_bootstrap(
        labels,
        scores,
        groups,
        metrics=[m.name for m in metrics],
        choice=choice,
        resamples=resamples,
        seed=seed,
        level=level,
    )
    out: dict[str, Any] = {"n": int(labels.size), "n_groups": result.n_groups}
    valid: dict[str, int] = {}
    for name in SUMMARY_METRICS:
        if name in result.metrics:
            estimate = result.estimate(name)
            out[name], out[f"{name}_ci"] = estimate.value, estimate.ci
            valid[name] = estimate.valid
        else:
            out[name], out[f"{name}_ci"] = None, None
    out["valid_resamples"] = valid
    out["resamples"] = result.resamples
    out["level"] = result.level
    out["scores_are_probabilities"] = _validate.is_probability(scores)
    return out


def paired_difference(
    y: ArrayLike,
    p1: ArrayLike,
    p2: ArrayLike,
    groups: ArrayLike,
    metric: str = "auroc",
    *,
    choice: ArrayLike | None = None,
    threshold: float = 0.5,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """Difference ``metric(p1) - metric(p2)`` with an interval from shared resamples.

    Both detectors are evaluated on the same group-bootstrap resamples, so the interval reflects
    the paired design (the shared item difficulty cancels).

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels.
    p1, p2 : array-like of float, shape (n,)
        Scores of the two detectors on the same items.
    groups : array-like, shape (n,)
        Group key of each item.
    metric : str
        One of ``app.stats.bootstrap.METRICS`` that depends on the scores (not
        ``"prevalence"``).
    choice : array-like, shape (n,), optional
        Strata, required for ``"choice_matched_auroc"``.
    threshold : float
        Decision threshold for ``"accuracy"``.
    resamples : int
        Bootstrap resamples.
    seed : int
        Root seed.
    level : float
        Interval coverage.

    Returns
    -------
    dict
        ``metric``, ``p1_value``, ``p2_value``, ``difference`` (``None`` if undefined),
        ``difference_ci`` (``[low, high]`` or ``None``), ``difference_ci_reason`` (why it is
        ``None`` although resamples were drawn: too few groups; else ``None``),
        ``p1_better_fraction`` (fraction of
        valid resamples where p1 is strictly better: higher, or lower for Brier),
        ``higher_is_better``, ``valid_resamples``, ``resamples`` and ``level``.

    Raises
    ------
    ValueError
        On invalid inputs or metric.

    """
    (out,) = paired_differences(
        y,
        p1,
        p2,
        groups,
        [metric],
        choice=choice,
        threshold=threshold,
        resamples=resamples,
        seed=seed,
        level=level,
    )
    return out


def paired_differences(
    y: ArrayLike,
    p1: ArrayLike,
    p2: ArrayLike,
    groups: ArrayLike,
    metrics: Sequence[str],
    *,
    choice: ArrayLike | None = None,
    threshold: float = 0.5,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> list[dict[str, Any]]:
    """:func:`paired_difference` of several metrics, all from one run of the bootstrap.

    Each metric's replicates do not depend on which other metrics are computed, so every
    entry equals the single-metric call with the same arguments.

    Returns
    -------
    list of dict
        One :func:`paired_difference` dict per metric, in the given order.

    """
    for metric in metrics:
        if metric not in _PAIRED:
            raise ValueError(f"metric must be one of {list(_PAIRED)}, got {metric!r}")
    labels = _validate.labels(y)
    first = _validate.scores(p1, labels.size, "p1")
    second = _validate.scores(p2, labels.size, "p2")
    result = group_bootstrap(
        labels,
        np.stack([first, second]),
        groups,
        metrics=metrics,
        choice=choice,
        threshold=threshold,
        resamples=resamples,
        seed=seed,
        level=level,
    )
    return difference_rows(result, metrics)


def difference_rows(result: BootstrapResult, metrics: Sequence[str]) -> list[dict[str, Any]]:
    """The first-minus-second differences of two detectors in ``result``, one dict per metric.

    Parameters
    ----------
    result : BootstrapResult
        A bootstrap of exactly two detectors (or models) on shared resamples.
    metrics : sequence of str
        Metrics of ``result``, in the order to report.

    Returns
    -------
    list of dict
        The keys of :func:`paired_difference`.

    """
    out = []
    for metric in metrics:
        diff = result.difference(metric, 0, 1)
        out.append(
            {
                "metric": metric,
                "p1_value": result.estimate(metric, 0).value,
                "p2_value": result.estimate(metric, 1).value,
                "difference": diff.estimate.value,
                "difference_ci": diff.estimate.ci,
                "difference_ci_reason": diff.estimate.reason,
                "p1_better_fraction": diff.first_better,
                "higher_is_better": REGISTRY[metric].higher_is_better,
                "valid_resamples": diff.estimate.valid,
                "resamples": diff.estimate.resamples,
                "level": result.level,
            }
        )
    return out
