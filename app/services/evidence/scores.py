"""Detector scores: one per detector and instance; read by benchmark, replaced by jobs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Select, delete, select
from sqlalchemy.orm import Session

from app.services.evidence.benchmarks import bump_data_version
from app.tables import Benchmark, Detector, Instance, Score


def benchmark_scores(detector_id: int, benchmark_id: int) -> Select[tuple[int, float]]:
    """The query of ``(instance id, score)`` of a detector's scores on a benchmark's instances."""
    return (
        select(Score.instance_id, Score.score)
        .join(Instance, Instance.id == Score.instance_id)
        .where(Score.detector_id == detector_id, Instance.benchmark_id == benchmark_id)
    )


def replace_scores(
    session: Session,
    detector: Detector,
    benchmark: Benchmark,
    scores: Mapping[int, tuple[float, dict[str, Any]]],
) -> int:
    """Make ``scores`` the detector's only scores on ``benchmark``; returns the rows written.

    A refitted probe replaces its earlier predictions on the benchmark as a whole (stale scores
    of items no longer retained must not linger); scores on other benchmarks stay.

    Parameters
    ----------
    session
        The caller's session; flushed, never committed.
    detector, benchmark
        Whose scores, where.
    scores
        ``instance id -> (score, details)``.

    """
    on_benchmark = select(Instance.id).where(Instance.benchmark_id == benchmark.id)
    session.execute(
        delete(Score)
        .where(Score.detector_id == detector.id, Score.instance_id.in_(on_benchmark))
        .execution_options(synchronize_session=False)
    )
    session.add_all(
        Score(detector_id=detector.id, instance_id=int(i), score=float(s), details=d)
        for i, (s, d) in scores.items()
    )
    session.flush()
    bump_data_version(session, benchmark)
    return len(scores)
