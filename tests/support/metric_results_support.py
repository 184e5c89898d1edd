"""Counting the metric computations a test causes (stored results should spare them)."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy.orm import Session

from app.services.metrics import metric_results
from app.services.metrics.metric_results import MetricsResult
from app.services.metrics.metrics_query import MetricsQuery


def _called_from_a_worker() -> bool:
    """Whether the current call passes through the ``workers`` package (a job's handler)."""
    frame = sys._getframe(1)
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("workers."):
            return True
        frame = frame.f_back
    return False


def count_computations(
    monkeypatch: pytest.MonkeyPatch, *users: ModuleType, skip_workers: bool = False
) -> list[MetricsQuery]:
    """Record every query ``compute_result`` computes; returns the (growing) list.

    Counted where ``metric_results`` calls it and in each module of ``users`` that imported it
    by name; with ``skip_workers`` a job's own computation (run in the test's process) is not
    counted, only the web process's.
    """
    calls: list[MetricsQuery] = []
    compute = metric_results.compute_result

    def counting(session: Session, query: MetricsQuery, **kwargs: Any) -> MetricsResult:
        if not (skip_workers and _called_from_a_worker()):
            calls.append(query)
        return compute(session, query, **kwargs)

    for module in (metric_results, *users):
        monkeypatch.setattr(module, "compute_result", counting)
    return calls
