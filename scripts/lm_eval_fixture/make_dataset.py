"""Write the local task's data: 200 MMLU-Redux test questions and 5 few-shot examples (JSON).

Usage: ``make_dataset.py MMLU_REDUX_DIR OUT_DIR``. The first 20 rows with a label of each of the
first 10 subject files (sorted) are the test set; rows 21-25 of the first subject the dev set.
Each record keeps the subject, the row number and the expert's ``error_type``.
"""

from __future__ import annotations

import ast
import csv
import json
import sys
from pathlib import Path

SUBJECTS = 10
PER_SUBJECT = 20
DEV = 5


def rows(path: Path) -> list[dict[str, object]]:
    """The labelled rows of one subject CSV as task records."""
    out = []
    with path.open(newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh), start=1):
            if not row["groundtruth_answer"].strip():
                continue
            out.append(
                {
                    "subject": path.stem,
                    "row": i,
                    "question": row["question"],
                    "choices": [str(c) for c in ast.literal_eval(row["choices"])],
                    "answer": int(row["groundtruth_answer"]),
                    "error_type": row["error_type"],
                }
            )
    return out


def main(source: Path, out: Path) -> None:
    """Write ``mmlu_redux_200.json`` and ``mmlu_redux_dev.json`` (JSON Lines) under ``out``."""
    files = sorted(source.glob("*.csv"))[:SUBJECTS]
    test, dev = [], []
    for k, path in enumerate(files):
        found = rows(path)
        test.extend(found[:PER_SUBJECT])
        if k == 0:
            dev.extend(found[PER_SUBJECT : PER_SUBJECT + DEV])
    out.mkdir(parents=True, exist_ok=True)
    for name, data in (("mmlu_redux_200.json", test), ("mmlu_redux_dev.json", dev)):
        with (out / name).open("w", encoding="utf-8") as fh:
            for record in data:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"{len(test)} test and {len(dev)} dev questions in {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
