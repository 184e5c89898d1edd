"""The demo data set: which bundled files the demo imports, each in its own transaction."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.ingest.statements import import_statements
from app.store import Store

BUNDLED_DATA = Path(__file__).resolve().parent.parent / "data"


def demo_files(data: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """JudgeBench pair files, JudgeBench judge-output files and statement CSVs under ``data``."""
    jb = data / "judgebench"
    pairs = sorted(jb.glob("dataset=judgebench,response_model=*.jsonl"))
    outputs = sorted((jb / "outputs").glob("*.jsonl"))
    truth = data / "truth"
    statements = [
        *sorted(truth.glob("*.csv")),
        truth / "real_world_scenarios" / "all_unambiguous_replies.csv",
    ]
    return pairs, outputs, statements


def load_demo_data(store: Store, data: Path = BUNDLED_DATA) -> Iterator[str]:
    """Import the bundled data (idempotent: rerunning adds nothing); yield one line per file."""
    pairs, outputs, statements = demo_files(data)
    if not pairs:
        raise FileNotFoundError(f"{data}: no JudgeBench pair files found")
    with transaction(store.factory) as session:
        summary = import_judgebench(session, pairs, outputs=outputs, benchmark="judgebench")
    yield summary.line()
    # One statement benchmark with the file stem as its `dataset` slice; the role-play replies
    # are a separate lie-detection benchmark.
    for path in statements:
        name = "real-world-scenarios" if path.parent.name == "real_world_scenarios" else "truth"
        with transaction(store.factory) as session:
            summary = import_statements(session, path, benchmark=name)
        yield summary.line()
