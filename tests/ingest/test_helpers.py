"""Shared helpers of the importer tests (this module holds no tests of its own)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.tables import Base, Instance, LabelEvent
from tests.conftest import DATA, REPO

JUDGEBENCH = DATA / "judgebench"
PAIRS = sorted(JUDGEBENCH.glob("dataset=judgebench,response_model=*.jsonl"))
PAIRS_GPT4O = JUDGEBENCH / "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"
OUTPUTS = sorted((JUDGEBENCH / "outputs").glob("*.jsonl"))
O1_MINI = next(p for p in OUTPUTS if "judge_model=o1-mini-2024-09-12" in p.name)
REWARD_OUTPUTS = [p for p in OUTPUTS if "judge_name=reward_model" in p.name]
O1_MINI_JUDGE = "arena_hard/o1-mini-2024-09-12"

# Small excerpts of real evaluation outputs (Apache-2.0, see each SOURCE.md) and a hand-written
# AlpacaEval file: always there. The full files of ../shared/data/formats are read when present
# (a clone of the project alone does not have them; AlpacaEval's are CC BY-NC and stay there).
FORMATS = Path(__file__).resolve().parent / "formats"
SHARED_FORMATS = Path(
    os.environ.get("APPELLATE_SHARED_FORMATS", REPO.parent / "shared" / "data" / "formats")
)


def table_counts(factory: sessionmaker[Session]) -> dict[str, int]:
    """Row count of every application table: equal before and after a refused import."""
    with factory() as session:
        return {
            table.name: session.scalar(select(func.count()).select_from(table)) or 0
            for table in Base.metadata.sorted_tables
        }


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every record of a JSONL file (test-side parsing, independent of the importers)."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Write ``rows`` as JSONL and return ``path``."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def current_labels(session: Session, benchmark_id: int, label_name: str) -> dict[str, str | None]:
    """``{external_id: latest value}`` of one label set (retractions as None)."""
    latest = (
        select(func.max(LabelEvent.id))
        .where(LabelEvent.label_name == label_name)
        .group_by(LabelEvent.instance_id)
    )
    q = (
        select(Instance.external_id, LabelEvent.value)
        .join(LabelEvent, LabelEvent.instance_id == Instance.id)
        .where(Instance.benchmark_id == benchmark_id, LabelEvent.id.in_(latest))
    )
    return {external_id: value for external_id, value in session.execute(q)}
