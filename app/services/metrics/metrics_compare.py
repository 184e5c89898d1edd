"""Metrics before and after review: each detector against the original and the resolved labels.

What a reviewer sees before accepting review: how AUROC and the other metrics move when the
votes and adjudications of a label set are applied, and how many items review changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.resolution import resolved_labels
from app.services.metrics.metric_matrix import MetricRow, matrix_rows
from app.services.metrics.metrics_query import METRICS_CACHE, MetricsQuery, load_metrics_data
from app.sql.cache import VersionedCache
from app.tables import Detector, Score

__all__ = ["DetectorComparison", "MetricsComparison", "compare_metrics"]

# Bound on the ids in one ``IN (...)`` list, as in app.services.evidence.labels.
_ID_CHUNK = 5000


@dataclass(frozen=True)
class DetectorComparison:
    """One detector's metric rows against the original and against the resolved labels.

    ``original`` and ``resolved`` hold rows as
    :func:`~app.services.metrics.metric_matrix.matrix_rows` gives them (all items, then per slice
    and the macro-average when slicing). ``changed`` counts the items this detector scored whose
    resolved value differs from the original, items that gained or lost a label included.
    """

    detector: str
    original: tuple[MetricRow, ...]
    resolved: tuple[MetricRow, ...]
    changed: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the rows as :meth:`MetricRow.as_dict`."""
        return {
            "detector": self.detector,
            "changed": self.changed,
            "original": [row.as_dict() for row in self.original],
            "resolved": [row.as_dict() for row in self.resolved],
        }


@dataclass(frozen=True)
class MetricsComparison:
    """Every detector on one label set, before and after review.

    ``changed`` counts the benchmark's instances whose resolved value differs from the
    original: ``relabelled`` ones have a different value, ``unlabelled`` ones lost their value
    (an adjudication to no label) and ``labelled`` ones gained one where the original had none.
    """

    benchmark: str
    label: str
    k: int
    positive: str
    negative: str | None
    changed: int
    relabelled: int
    unlabelled: int
    labelled: int
    detectors: tuple[DetectorComparison, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, detectors as :meth:`DetectorComparison.as_dict`."""
        return {
            "benchmark": self.benchmark,
            "label": self.label,
            "k": self.k,
            "positive": self.positive,
            "negative": self.negative,
            "changed": self.changed,
            "relabelled": self.relabelled,
            "unlabelled": self.unlabelled,
            "labelled": self.labelled,
            "detectors": [d.as_dict() for d in self.detectors],
        }


def compare_metrics(
    session: Session,
    benchmark: str,
    label: str = "reference",
    *,
    k: int = 2,
    detectors: Sequence[str] | None = None,
    slice_field: str | None = None,
    positive: str | None = None,
    resamples: int = 2000,
    seed: int = 0,
    cache: VersionedCache | None = METRICS_CACHE,
) -> MetricsComparison:
    """Metric rows of each detector against the original and the resolved label set.

    Both sides are :func:`app.services.metrics.metric_matrix.matrix_rows` with the same target rule,
    detectors, slices, resamples and seed, so a difference between them comes from the labels
    alone: where review only relabels items, both bootstraps draw the same groups.

    Parameters
    ----------
    session : Session
        The caller's session (read only).
    benchmark : str
        Benchmark name.
    label : str
        Label set name.
    k : int
        Agreeing voters needed for votes to override the original (at least 1).
    detectors : sequence of str, optional
        Detector names; default every detector with scores on the benchmark.
    slice_field : str, optional
        Payload field that defines the slices.
    positive : str, optional
        Explicit positive class of the label set.
    resamples, seed : int
        Group-bootstrap resamples and root seed, shared by both sides.
    cache : VersionedCache, optional
        Memo of the metric rows (see :func:`app.services.metrics.metric_matrix.matrix_rows`).

    Returns
    -------
    MetricsComparison
        Detectors in the order of the metric rows.

    Raises
    ------
    NotFound
        Unknown benchmark, label set or detector, or no resolved value of the label set.
    InvalidInput
        Label set not binary before or after review, or the two sides would read a different
        positive class; bad slice field, resamples, seed or ``k``.

    """
    query = MetricsQuery(
        benchmark,
        label,
        k=k,
        positive=positive,
        detectors=tuple(detectors or ()),
        slice_field=slice_field,
        resamples=resamples,
        seed=seed,
    )
    original = load_metrics_data(session, query)
    resolved = load_metrics_data(session, replace(query, labels="resolved"))
    target, after_target = original.target, resolved.target
    if after_target.positive != target.positive:
        # Unreachable for the known vocabularies; a named positive keeps its meaning too.
        raise InvalidInput(
            f"label set {label!r} reads positive {target.positive!r} before review and "
            f"{after_target.positive!r} after; name the positive class"
        )
    before, after = matrix_rows(original, cache), matrix_rows(resolved, cache)
    bench = original.benchmark
    resolutions = resolved_labels(session, bench.id, label, k=k)
    changes = [r for r in resolutions.values() if r.changed]
    changed_ids = [iid for iid, r in resolutions.items() if r.changed]
    names = list(dict.fromkeys(row.detector for row in before))
    per_detector = _scored_counts(session, names, changed_ids)
    return MetricsComparison(
        benchmark=bench.name,
        label=label,
        k=k,
        positive=target.positive,
        negative=target.negative,
        changed=len(changes),
        relabelled=sum(r.original is not None and r.resolved is not None for r in changes),
        unlabelled=sum(r.resolved is None for r in changes),
        labelled=sum(r.original is None for r in changes),
        detectors=tuple(
            DetectorComparison(
                detector=name,
                original=tuple(r for r in before if r.detector == name),
                resolved=tuple(r for r in after if r.detector == name),
                changed=per_detector.get(name, 0),
            )
            for name in names
        ),
    )


def _scored_counts(
    session: Session, detectors: Sequence[str], instance_ids: Sequence[int]
) -> dict[str, int]:
    """``{detector: how many of instance_ids it scored}``, one grouped count per id chunk."""
    out: dict[str, int] = {}
    if not detectors or not instance_ids:
        return out
    for start in range(0, len(instance_ids), _ID_CHUNK):
        chunk = instance_ids[start : start + _ID_CHUNK]
        q = (
            select(Detector.name, func.count())
            .join(Score, Score.detector_id == Detector.id)
            .where(Detector.name.in_(list(detectors)), Score.instance_id.in_(chunk))
            .group_by(Detector.name)
        )
        for name, count in session.execute(q):
            out[name] = out.get(name, 0) + int(count)
    return out
