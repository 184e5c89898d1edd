"""The end of every import: derived flip labels, the data-version bump, statistics, the summary."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.ingest.records import ImportSummary
from app.services.evidence.benchmarks import bump_data_version
from app.services.evidence.flips import recompute_flips
from app.tables import Benchmark, Instance, Judgment, LabelEvent, Prediction, Score

ANALYZE_FROM_ROWS = 10_000
"""Rows added by one import from which PostgreSQL's planner statistics are refreshed at once."""

_ANALYZED = tuple(t.__table__.name for t in (Instance, LabelEvent, Score, Prediction, Judgment))


def finalize_import(
    session: Session,
    benchmark: Benchmark,
    summary: ImportSummary,
    *,
    judges: Collection[int] = (),
) -> ImportSummary:
    """Recompute the flips and scores of ``judges``, bump the data version if evidence changed.

    Parameters
    ----------
    session
        The import's session.
    benchmark
        The benchmark imported into.
    summary
        Counts gathered so far; completed in place and returned.
    judges
        Detector ids whose judgments were imported (their flip labels and derived scores are
        recomputed).

    """
    derived_scores = False
    if judges:
        flips = recompute_flips(session, benchmark.id, detector_ids=judges)
        summary.derived_labels += flips.events
        derived_scores = flips.scores > 0
    summary.benchmark = benchmark.name
    if summary.evidence_added or summary.derived_labels or derived_scores:
        summary.data_version = bump_data_version(session, benchmark)
    else:
        summary.data_version = benchmark.data_version
    session.flush()
    if summary.added >= ANALYZE_FROM_ROWS and session.get_bind().dialect.name == "postgresql":
        # A big import into tables the planner has no statistics of (a new store) would be
        # planned as if they were empty until autovacuum gets round to them: 50-row page
        # reads then scan whole indexes (70-95 ms instead of 0.2 ms at a million items).
        # ANALYZE samples a fixed number of rows (about a second at that size) and runs in
        # the import's transaction.
        session.execute(text(f"ANALYZE {', '.join(_ANALYZED)}"))
    return summary
