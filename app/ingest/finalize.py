"""The end of every import: derived flip labels, the data-version bump and the summary."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy.orm import Session

from app.ingest.records import ImportSummary
from app.services.benchmarks import bump_data_version
from app.services.flips import recompute_flips
from app.tables import Benchmark


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
    return summary
