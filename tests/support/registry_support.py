"""What the metric registry says a metrics JSON row holds, for tests that check row keys."""

from __future__ import annotations

from app.services.metrics.metric_matrix import INTERVAL_METRICS, MATRIX_METRICS
from app.stats.registry import Need

__all__ = ["INTERVAL_METRICS", "RANKER_ONLY", "row_keys"]

RANKER_ONLY: tuple[str, ...] = tuple(m.name for m in MATRIX_METRICS if Need.RANKING in m.needs)
"""Metrics reported for label-error rankers only (precision and recall at k)."""


def row_keys() -> list[str]:
    """The keys of a JSON metric row, in order, as the registry declares its columns."""
    keys = ["detector", "slice", "n"]
    for metric in MATRIX_METRICS:
        keys += [metric.name, f"{metric.name}_ci"] if metric.interval else [metric.name]
    return keys
