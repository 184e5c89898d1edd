"""Recall at k per defect type: how many of each kind of defect the top of each ranking finds.

A label set such as MMLU-Redux's ``errata`` names the kind of each defect (``wrong_groundtruth``,
``bad_question_clarity``, ...) while a binary one (``defect``) says whether there is one. For each
type, the positives are the defects of that type; every detector ranks the same items (those with
a value of the binary label that every detector scored), and recall at k is the share of that
type's defects among its k highest-scored items (ties shared, as in the metric matrix), with
group-bootstrap intervals (:func:`app.stats.bootstrap.group_bootstrap`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.detectors import RANKER_PREFIX
from app.services.evidence.labelled_items import (
    detector_scores,
    get_detector,
    load_labelled,
    scored_detectors,
)
from app.services.evidence.labels import current_label_subquery
from app.stats.bootstrap import group_bootstrap
from app.stats.registry import TOP_K
from app.tables import Instance

__all__ = ["type_recall"]


def type_recall(
    session: Session,
    benchmark: str,
    label: str,
    types: str,
    detectors: Sequence[str] | None = None,
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Each detector's recall at 50, 100 and 200 per value of ``types`` among the defects.

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark
        Benchmark name.
    label
        The binary label set (positive = defect), e.g. ``defect``.
    types
        The label set naming each defect's type, e.g. ``errata``.
    detectors
        Detector names; default every ``ranker:*`` detector with scores here, else every scored
        detector.
    resamples, seed
        Group-bootstrap resamples and root seed.

    Returns
    -------
    dict
        ``label``, ``types``, ``n`` (items ranked), ``detectors`` and ``rows``: one per type
        (most defects first), ``{"type", "defects", "recall": {detector: {"recall_at_50":
        value, "recall_at_50_ci": [lo, hi] or None, ...}}}``.

    Raises
    ------
    InvalidInput
        When no defect has a type, or no item is scored by every detector.

    """
    bench = get_benchmark(session, benchmark)
    items = load_labelled(session, bench, label)
    if detectors:
        chosen = [get_detector(session, name) for name in detectors]
    else:
        scored = scored_detectors(session, bench)
        chosen = [d for d in scored if d.name.startswith(RANKER_PREFIX)] or scored
    if not chosen:
        raise InvalidInput(f"benchmark {bench.name!r} has no scored detector", field="detector")
    scores = np.stack([detector_scores(session, d, items) for d in chosen])
    kept = ~np.isnan(scores).any(axis=0)
    if not kept.any():
        raise InvalidInput("no item is scored by every detector", field="detector")
    values = dict(
        session.execute(
            select(Instance.id, current_label_subquery(types)).where(
                Instance.benchmark_id == bench.id
            )
        ).all()
    )
    kind = np.array([values.get(int(i)) or "" for i in items.instance_ids], dtype=object)[kept]
    y = items.y[kept].astype(bool)
    groups = np.asarray(items.groups, dtype=object)[kept]
    found = sorted({str(t) for t in kind[y] if t})
    if not found:
        raise InvalidInput(f"no {label} defect has a value of {types!r}", field="types")
    metrics = tuple(f"recall_at_{k}" for k in TOP_K)
    rows = []
    for name in sorted(found, key=lambda t: (-int(((kind == t) & y).sum()), t)):
        target = y & (kind == name)
        result = group_bootstrap(
            target,
            scores[:, kept],
            groups,
            metrics=metrics,
            resamples=resamples,
            seed=seed,
        )
        recall: dict[str, dict[str, Any]] = {}
        for j, detector in enumerate(chosen):
            cells: dict[str, Any] = {}
            for metric in metrics:
                estimate = result.estimate(metric, j)
                cells[metric] = estimate.value
                cells[f"{metric}_ci"] = estimate.ci
            recall[detector.name] = cells
        rows.append({"type": name, "defects": int(target.sum()), "recall": recall})
    return {
        "label": label,
        "types": types,
        "n": int(kept.sum()),
        "detectors": [d.name for d in chosen],
        "resamples": resamples,
        "seed": seed,
        "rows": rows,
    }
