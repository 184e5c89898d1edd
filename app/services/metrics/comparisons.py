"""Paired detector comparisons: probe minus baseline on shared bootstrap resamples.

Also the Brier score of a constant predictor at a frozen probe's source prevalence, the bar a
transferred probe must clear without any recalibration.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.services.evidence.detectors import RANKER_PREFIX
from app.services.evidence.labelled_items import LabelMode, get_detector
from app.services.metrics.metric_matrix import ranks_for_review
from app.services.metrics.metrics_query import (
    METRICS_CACHE,
    MetricsData,
    MetricsQuery,
    load_metrics_data,
)
from app.stats.bootstrap import group_bootstrap, stack_results
from app.stats.registry import INTERVAL, applicable
from app.stats.summary import difference_rows, paired_differences
from app.tables import Detector

__all__ = ["comparisons", "comparisons_report", "default_pairs"]

PROBE_PREFIX = "probe:"
BASELINE_PREFIX = "baseline:"
CONSENSUS_RANKER = RANKER_PREFIX + "consensus"


def default_pairs(names: Sequence[str]) -> list[tuple[str, str]]:
    """Detector pairs compared by default on a metrics page.

    Each probe against each baseline of the same judge (``probe:J`` vs ``baseline:J[:f]``),
    and each label-error ranker against the plain consensus ranker.
    """
    pairs = [
        (name, CONSENSUS_RANKER)
        for name in names
        if name.startswith(RANKER_PREFIX) and name != CONSENSUS_RANKER and CONSENSUS_RANKER in names
    ]
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


def _compare(data: MetricsData, first: Detector, second: Detector) -> dict[str, Any]:
    sample = data.sample(first, second)
    out: dict[str, Any] = {"first": first.name, "second": second.name, "n": sample.n}
    if sample.n < 2 or len(set(sample.y.tolist())) < 2:
        out["metrics"] = []
        return out
    p1, p2 = sample.scores
    ranking = ranks_for_review(first) and ranks_for_review(second)
    metrics = applicable(INTERVAL, p1, p2, strata=sample.strata is not None, ranking=ranking)
    names = [m.name for m in metrics]
    one, two = data.bootstraps.get(first.id), data.bootstraps.get(second.id)
    if one is not None and two is not None and one.n_items == two.n_items == sample.n:
        # Both scored exactly these items, on the request's seed: the matrix's two bootstraps
        # drew the same resamples, so the paired replicates are already at hand.
        out["metrics"] = difference_rows(stack_results(one, two, names), names)
        return out
    out["metrics"] = paired_differences(
        sample.y,
        p1,
        p2,
        sample.groups,
        [m.name for m in metrics],
        choice=sample.strata,
        resamples=data.query.resamples,
        seed=data.query.seed,
    )
    return out


def _constant(data: MetricsData, probe: Detector) -> dict[str, Any] | None:
    prevalence = (probe.details or {}).get("source_prevalence")
    sample = data.sample(probe)
    if prevalence is None or sample.n == 0:
        return None
    constant = np.full(sample.n, float(prevalence))
    result = group_bootstrap(
        sample.y,
        constant,
        sample.groups,
        metrics=["brier"],
        resamples=data.query.resamples,
        seed=data.query.seed,
    )
    estimate = result.estimate("brier")
    return {
        "probe": probe.name,
        "source_prevalence": float(prevalence),
        "n": sample.n,
        "brier": estimate.value,
        "brier_ci": estimate.ci,
        "brier_ci_reason": estimate.reason,
    }


def comparisons(
    session: Session,
    data: MetricsData,
    pairs: Sequence[tuple[str, str]] | None = None,
    detectors: Collection[str] | None = None,
) -> dict[str, Any]:
    """Paired differences (first - second) with intervals, and constant-predictor Briers.

    Parameters
    ----------
    session
        The caller's session (read only), for detectors named by ``pairs`` only.
    data
        The loaded request: items, target, strata, scores, resamples and seed.
    pairs
        ``(first, second)`` detector names; default :func:`default_pairs` of the scored ones.
    detectors
        Restrict the scored detectors (default pairs, constant predictors) to these names.

    Returns
    -------
    dict
        ``pairs``: one entry per pair with ``first``, ``second``, ``n`` (items both scored)
        and ``metrics`` (see :func:`app.stats.summary.paired_difference`; the registry's
        interval metrics that apply), and ``constant_predictors``: for each frozen probe with
        a ``source_prevalence``, the Brier score of always predicting it.

    """
    scored = [d for d in data.scored if detectors is None or d.name in detectors]
    names = [d.name for d in scored]
    chosen = list(pairs) if pairs is not None else default_pairs(names)
    known = {d.name: d for d in (*data.scored, *data.detectors)}

    def detector(name: str) -> Detector:
        return known[name] if name in known else get_detector(session, name)

    def compute() -> dict[str, Any]:
        out = [_compare(data, detector(a), detector(b)) for a, b in chosen]
        constants = [_constant(data, d) for d in scored if d.kind == "probe"]
        return {"pairs": out, "constant_predictors": [c for c in constants if c is not None]}

    key: Hashable = (
        "comparisons",
        *data.key,
        tuple(chosen),
        tuple(names),
        data.query.resamples,
        data.query.seed,
    )
    return METRICS_CACHE.get_or_compute(key, compute)


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
    """:func:`comparisons` of one benchmark and label set, read for this call.

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
        Original or resolved labels (see
        :func:`app.services.evidence.labelled_items.load_labelled`).

    Returns
    -------
    dict
        See :func:`comparisons`.

    """
    query = MetricsQuery(benchmark, label, labels, k, positive, resamples=resamples, seed=seed)
    return comparisons(session, load_metrics_data(session, query), pairs, detectors)
