"""Copy an excerpt of lm-eval run folders: each run's results file and its first N samples.

Usage: ``excerpt.py RUNS_DIR OUT_DIR N``. Every ``samples_*.jsonl`` under RUNS_DIR keeps the lines
whose ``doc_id`` is below N, byte for byte (the same questions in every run); ``results_*.json``
is copied unchanged. The folder layout under RUNS_DIR is kept.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def main(runs: Path, out: Path, n: int) -> None:
    """Write the excerpt of every run under ``runs`` to ``out``."""
    for path in sorted(runs.rglob("*")):
        if not path.is_file():
            continue
        target = out / path.relative_to(runs)
        if path.name.startswith("results_") and path.suffix == ".json":
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        elif path.name.startswith("samples_") and path.suffix == ".jsonl":
            target.parent.mkdir(parents=True, exist_ok=True)
            with path.open("rb") as src, target.open("wb") as dst:
                for line in src:
                    if json.loads(line)["doc_id"] < n:
                        dst.write(line)
            print(target)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
