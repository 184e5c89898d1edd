"""Which pairs a judge job with a limit judges: a seeded sample that prefers compared pairs.

A judge judged on the first N pairs by id can rarely be compared with anything: other detectors
may have scored quite different pairs, and the metric page then lists them with n = 0. The
sample puts first the pairs the most other detectors scored or judged, and orders pairs of equal
coverage by a seeded hash of their external id, so the choice is reproducible, survives a resumed
job (it reads nothing the job itself writes) and grows by extension: N + k pairs of a seed
contain its N.
"""

from __future__ import annotations

import hashlib
from collections import Counter

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.tables import Instance, Judgment, Score

__all__ = ["sample_pairs", "seeded_rank"]


def seeded_rank(seed: int, external_id: str) -> int:
    """A pseudo-random rank of ``external_id`` under ``seed`` (64-bit, stable across stores)."""
    digest = hashlib.sha256(f"{seed}\x00{external_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def sample_pairs(
    session: Session, benchmark_id: int, detector_id: int, n: int, seed: int
) -> list[int]:
    """Ids of ``n`` pairs of the benchmark for detector ``detector_id`` to judge, in order.

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark_id
        The benchmark.
    detector_id
        The judge; its own scores and judgments do not count as coverage.
    n
        How many pairs (all of them when the benchmark has fewer).
    seed
        Seed of the order among pairs of equal coverage.

    Returns
    -------
    list of int
        Instance ids, most-covered first, then by :func:`seeded_rank`, then by id.

    """
    # (pair, detector) once, whether the detector scored the pair, judged it, or both.
    covered: set[tuple[int, int]] = set()
    for table in (Score, Judgment):
        q = (
            select(table.instance_id, table.detector_id)
            .join(Instance, Instance.id == table.instance_id)
            .where(Instance.benchmark_id == benchmark_id, table.detector_id != detector_id)
            .distinct()
        )
        covered.update((i, d) for i, d in session.execute(q))
    coverage = Counter(instance_id for instance_id, _ in covered)
    rows = session.execute(
        select(Instance.id, Instance.external_id).where(Instance.benchmark_id == benchmark_id)
    )
    ranked = sorted(rows, key=lambda r: (-coverage[r[0]], seeded_rank(seed, r[1]), r[0]))
    return [instance_id for instance_id, _ in ranked[:n]]
