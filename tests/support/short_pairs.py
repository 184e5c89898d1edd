"""The shortest real JudgeBench pairs, for tests that run the real model on a few of them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import DATA

JUDGEBENCH = DATA / "judgebench" / "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl"


def shortest_pairs(folder: Path, n: int, source: Path = JUDGEBENCH) -> Path:
    """A copy of ``source`` (same file name) in ``folder`` holding its ``n`` shortest pairs.

    A real-model judgment costs about the square of its prompt's length: the shortest pairs
    judge in a fraction of the time of a sample of typical ones (about 1,500 characters a pair
    against a median of 5,300), with every code path the same.
    """
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()]
    rows.sort(key=lambda r: len(r["question"]) + len(r["response_A"]) + len(r["response_B"]))
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / source.name
    out.write_text("".join(json.dumps(r) + "\n" for r in rows[:n]), encoding="utf-8")
    return out
