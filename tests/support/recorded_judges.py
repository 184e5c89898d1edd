"""Two real SmolLM2 judge configurations' verdicts on 60 JudgeBench pairs, loaded into a store.

``tests/metrics/data/smollm2_two_judges.json`` was written once by
``benchmarks/record_smollm2_judges.py`` from real runs (forced and calibrated mode);
:func:`load_recorded_judges` writes those judgments under their judges' names and derives the
flips, as a judge job would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.detectors import ensure_detector
from app.services.evidence.flips import recompute_flips
from app.tables import Instance, Judgment

RECORDED = Path(__file__).resolve().parent.parent / "metrics" / "data" / "smollm2_two_judges.json"


def recorded_verdicts() -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """``{judge: {pair id: {order: {choice, verdict_logits}}}}`` as recorded."""
    return json.loads(RECORDED.read_text())["verdicts"]  # type: ignore[no-any-return]


def load_recorded_judges(session: Session, benchmark: str) -> list[str]:
    """Write the recorded judgments onto ``benchmark`` (its pairs must be imported); their names."""
    bench = get_benchmark(session, benchmark)
    verdicts = recorded_verdicts()
    wanted = {ext for by_pair in verdicts.values() for ext in by_pair}
    ids = dict(
        session.execute(
            select(Instance.external_id, Instance.id).where(
                Instance.benchmark_id == bench.id, Instance.external_id.in_(sorted(wanted))
            )
        ).all()
    )
    assert len(ids) == len(wanted), "the recorded pairs are JudgeBench's GPT-4o pairs"
    for judge, by_pair in verdicts.items():
        detector = ensure_detector(session, judge, "judge")
        for ext, orders in by_pair.items():
            for order, v in orders.items():
                session.add(
                    Judgment(
                        instance_id=ids[ext],
                        detector_id=detector.id,
                        order=order,
                        choice=v["choice"],
                        verdict_logits=v["verdict_logits"],
                    )
                )
    session.flush()
    recompute_flips(session, bench.id)
    return sorted(verdicts)
