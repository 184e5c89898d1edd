"""Paired detector comparisons: probe minus baseline on shared bootstrap resamples.

Also the Brier score of a constant predictor at a frozen probe's source prevalence, the bar a
transferred probe must clear without any recalibration.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.services.metrics import (
    METRICS_CACHE,
    LabelledItems,
    LabelMode,
    ab_choices,
    data_key,
    detector_scores,
    get_detector,
    label_key,
    load_labelled,
    scored_detectors,
)
from app.stats import _validate
from app.stats.bootstrap import group_bootstrap
from app.stats.summary import paired_difference
from app.tables import Detector

PROBE_PREFIX = "probe:"
BASELINE_PREFIX = "baseline:"


def default_pairs(names: Sequence[str]) -> list[tuple[str, str]]:
    """Each probe against each baseline of the same judge: ``probe:J`` vs ``baseline:J[:f]``."""
    pairs = []
    for name in names:
        if not name.startswith(PROBE_PREFIX):
            continue
        source = name.removeprefix(PROBE_PREFIX)
        for other in names:
            rest = other.removeprefix(BASELINE_PREFIX)
            if other.startswith(BASELINE_PREFIX) and (
                rest == source or rest.startswith(source + ":")
            ):
                pairs.append((name, other))
    return pairs


def _compare(
    session: Session,
    items: LabelledItems,
    first: Detector,
    second: Detector,
    choice: list[str] | None,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    p1, p2 = detector_scores(session, first, items), detector_scores(session, second, items)
    both = ~(np.isnan(p1) | np.isnan(p2))
    out: dict[str, Any] = {"first": first.name, "second": second.name, "n": int(both.sum())}
    if both.sum() < 2 or len(set(items.y[both].tolist())) < 2:
        out["metrics"] = []
        return out
    y, groups = items.y[both], [g for g, k in zip(items.groups, both, strict=True) if k]
    metrics = ["auroc", "auprc"]
    if _validate.is_probability(p1[both]) and _validate.is_probability(p2[both]):
        metrics.append("brier")
    strata = None
    if choice is not None:
        strata = [c for c, k in zip(choice, both, strict=True) if k]
        metrics.append("choice_matched_auroc")
    out["metrics"] = [
        paired_difference(
            y,
            p1[both],
            p2[both],
            groups,
            metric,
            choice=strata,
            resamples=resamples,
            seed=seed,
        )
        for metric in metrics
    ]
    return out


def _constant(
    items: LabelledItems, probe: Detector, p: np.ndarray, resamples: int, seed: int
) -> dict[str, Any] | None:
    prevalence = (probe.details or {}).get("source_prevalence")
    scored = ~np.isnan(p)
    if prevalence is None or scored.sum() == 0:
        return None
    y, groups = items.y[scored], [g for g, k in zip(items.groups, scored, strict=True) if k]
    constant = np.full(int(scored.sum()), float(prevalence))
    result = group_bootstrap(y, constant, groups, metrics=["brier"], resamples=resamples, seed=seed)
    estimate = result.estimate("brier")
    return {
        "probe": probe.name,
        "source_prevalence": float(prevalence),
        "n": int(scored.sum()),
        "brier": estimate.value,
        "brier_ci": estimate.ci,
    }


def comparisons_report(
    session: Session,
    benchmark: str,
    label: str,
    pairs: Sequence[tuple[str, str]] | None = None,
    *,
    positive: str | None = None,
    resamples: int = 2000,
    seed: int = 0,
    detectors: Sequence[str] | None = None,
    labels: LabelMode = "original",
    k: int = 2,
) -> dict[str, Any]:
    """Paired differences (first - second) with intervals, and constant-predictor Briers.

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark, label, positive
        The items and binary target, as for the metric matrix.
    pairs
        ``(first, second)`` detector names; default :func:`default_pairs` of the scored ones.
    resamples, seed
        Group bootstrap; both detectors of a pair share every resample.
    detectors
        Restrict the constant-predictor rows to these detectors (default: all scored).
    labels, k
        Original or resolved labels (see :func:`app.services.metrics.load_labelled`).

    Returns
    -------
    dict
        ``pairs``: one entry per pair with ``metrics`` (see
        :func:`app.stats.summary.paired_difference`), and ``constant_predictors``: for each
        frozen probe with a ``source_prevalence``, the Brier score of always predicting it.

    """
    items = load_labelled(session, benchmark, label, positive=positive, labels=labels, k=k)
    names = [d.name for d in scored_detectors(session, items.benchmark)]
    if detectors is not None:
        names = [n for n in names if n in set(detectors)]
    chosen = list(pairs) if pairs is not None else default_pairs(names)

    def compute() -> dict[str, Any]:
        choice = ab_choices(session, items)
        out = [
            _compare(
                session,
                items,
                get_detector(session, a),
                get_detector(session, b),
                choice,
                resamples,
                seed,
            )
            for a, b in chosen
        ]
        constants = []
        for name in names:
            detector = get_detector(session, name)
            if detector.kind == "probe":
                row = _constant(
                    items, detector, detector_scores(session, detector, items), resamples, seed
                )
                if row is not None:
                    constants.append(row)
        return {"pairs": out, "constant_predictors": constants}

    key: Hashable = (
        "comparisons",
        *data_key(session, items.benchmark),
        label,
        items.target.positive,
        *label_key(labels, k),
        tuple(chosen),
        tuple(names),
        resamples,
        seed,
    )
    return METRICS_CACHE.get_or_compute(key, compute)
