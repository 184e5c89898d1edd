"""Metrics of label-error rankers on a large choice benchmark, end to end through the store.

Seeds a fresh SQLite store through ``import_table`` with N choice items in G groups (four per
group), a binary ``defect`` label (about 6% positives) and R ranker score columns, then times
``metrics_report(..., label="defect", resamples=B)`` cold (the in-process and stored results
cleared before each round): reading the labelled items and every ranker's scores, and AUROC,
AUPRC, Brier, ECE, precision/recall at 50/100/200 with group-bootstrap intervals, per ranker and
paired against ranker:consensus. The target is an absolute one (under 10 s on 2 cores), so no
ratio is printed; the like-with-like speed comparison of the bootstrap kernels against
scikit-learn is ``metrics_bench.py``. The point values are checked against scikit-learn on the
CSV's own columns. Prints one JSON object::

Reference: the absolute target; scikit-learn for the point values.

    python benchmarks/ranker_metrics_bench.py [--n 100000] [--groups 25000] [--rankers 10]
        [--resamples 2000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sklearn.metrics import average_precision_score, roc_auc_score  # noqa: E402
from sqlalchemy import delete, update  # noqa: E402

from app import migrate  # noqa: E402
from app.db import make_engine, session_factory, transaction  # noqa: E402
from app.ingest.table import import_table  # noqa: E402
from app.services.evidence.detectors import RANKER_KIND, RANKER_PREFIX  # noqa: E402
from app.services.metrics.metrics_query import METRICS_CACHE  # noqa: E402
from app.services.metrics.report import metrics_report  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.tables import Detector, MetricResult  # noqa: E402

TARGET_S = 10.0


def seed_csv(path: Path, n: int, groups: int, rankers: int, seed: int) -> list[str]:
    """Write the benchmark's CSV; returns the ranker column names (the first is consensus)."""
    rng = np.random.default_rng(seed)
    codes = np.concatenate([np.arange(groups), rng.integers(0, groups, n - groups)])
    defect = rng.random(n) < 0.06
    names = ["consensus", *(f"ranker{j:02d}" for j in range(1, rankers))]
    # Scores that see the defects through noise; 14-model vote fractions have many ties, so
    # half the rankers are coarse.
    scores = []
    for j in range(rankers):
        raw = 1 / (1 + np.exp(-(1.5 * defect + rng.normal(size=n) - 2.0)))
        scores.append(np.round(raw * 14) / 14 if j % 2 == 0 else np.round(raw, 4))
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "group", "question", "a", "b", "c", "d", "gold", "defect", *names])
        for i in range(n):
            item = [f"q{i:07d}", f"g{codes[i]:06d}", f"question {i}", "w", "x", "y", "z"]
            writer.writerow(
                [*item, "ABCD"[i % 4], int(defect[i]), *(f"{s[i]:.6g}" for s in scores)]
            )
    return names


def main() -> None:
    """Seed, time the cold metrics report and the naive loop, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=25_000)
    parser.add_argument("--rankers", type=int, default=10)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1, help="cold reports, median taken")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="appellate-rank-bench-") as tmp:
        work = Path(tmp)
        settings = Settings(data_dir=work)
        engine = make_engine(settings)
        migrate.upgrade(engine)
        factory = session_factory(engine)
        names = seed_csv(work / "items.csv", args.n, args.groups, args.rankers, seed=0)
        t0 = time.perf_counter()
        with transaction(factory) as session:
            import_table(
                session, work / "items.csv", "choice", {"question": "question"},
                id_column="id", group="group", labels={"reference": "gold", "defect": "defect"},
                option_columns=dict(zip("ABCD", "abcd", strict=True)),
                scores={RANKER_PREFIX + n: n for n in names}, benchmark="big",
            )  # fmt: skip
            session.execute(
                update(Detector)
                .where(Detector.name.in_([RANKER_PREFIX + n for n in names]))
                .values(kind=RANKER_KIND)
            )
        seeded_s = time.perf_counter() - t0
        walls, cpus = [], []
        for _ in range(args.rounds):
            METRICS_CACHE.clear()
            with transaction(factory) as session:
                session.execute(delete(MetricResult))  # cold: nothing stored either
            wall, cpu = time.perf_counter(), time.process_time()
            with factory() as session:
                report = metrics_report(session, "big", "defect", resamples=args.resamples, seed=0)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        rows = {r["detector"]: r for r in report["rows"] if r["slice"] is None}
        # Point values against scikit-learn on the CSV's own columns.
        with open(work / "items.csv", newline="", encoding="utf-8") as fh:
            table = list(csv.DictReader(fh))
        y = np.array([int(r["defect"]) for r in table], dtype=bool)
        worst = 0.0
        for name in names:
            p = np.array([float(r[name]) for r in table])
            row = rows[RANKER_PREFIX + name]
            worst = max(
                worst,
                abs(row["auroc"] - roc_auc_score(y, p)),
                abs(row["auprc"] - average_precision_score(y, p)),
            )
        engine.dispose()
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    result: dict[str, Any] = {
        "reference": (
            "absolute target (under 10 s on 2 cores); point values checked against scikit-learn"
        ),
        "items": args.n,
        "groups": args.groups,
        "rankers": args.rankers,
        "resamples": args.resamples,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "seed_import_s": round(seeded_s, 1),
        "metrics_report_cold_wall_s": round(wall, 2),
        "metrics_report_cold_cpu_s": round(cpu, 2),
        "rounds_wall_s": [round(w, 2) for w in walls],
        "metrics_per_row": sorted(k for k in next(iter(rows.values())) if not k.endswith("_ci")),
        "paired_comparisons": len(report["comparisons"]),
        "max_abs_diff_vs_sklearn": worst,
        "under_target": wall < TARGET_S,
        "target_s": TARGET_S,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
