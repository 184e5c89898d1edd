"""Counting the metric computations a test causes (stored results should spare them)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from sqlalchemy.orm import Session

from app.services.metrics import metric_results
from app.services.metrics.metric_results import MetricsResult
from app.services.metrics.metrics_query import MetricsQuery


def count_computations(monkeypatch: pytest.MonkeyPatch, *users: ModuleType) -> list[MetricsQuery]:
    """Record every query ``compute_result`` computes; returns the (growing) list.

    Counted where ``metric_results`` calls it and in each module of ``users`` that imported it
    by name.
    """
    calls: list[MetricsQuery] = []
    compute = metric_results.compute_result

    def counting(session: Session, query: MetricsQuery, **kwargs: Any) -> MetricsResult:
        calls.append(query)
        return compute(session, query, **kwargs)

    for module in (metric_results, *users):
        monkeypatch.setattr(module, "compute_result", counting)
    return calls
