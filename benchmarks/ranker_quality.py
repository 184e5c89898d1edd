"""How well each label-error ranker finds the experts' defects on the real MMLU-Redux subjects.

Imports the MMLU-Redux subject CSVs (``data/mmlu-redux``: 2,900 questions, 14 models' answers,
the experts' verdict on every label) into a fresh SQLite store as ``appellate import mmlu-redux``
does, runs every ranker as the rank-errors job does, and scores each against ``defect``: AUROC,
AUPRC and precision at 100 with group-bootstrap intervals (subjects resampled), and the paired
difference against the consensus ranker on the same resamples (``better``: the share of resamples
where the ranker beats consensus). The combiner's scores are out-of-fold.

Reference: the consensus ranker (the fraction of models against the label). Prints JSON::

    python benchmarks/ranker_quality.py [--data data/mmlu-redux] [--resamples 2000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app import migrate  # noqa: E402
from app.db import make_engine, session_factory, transaction  # noqa: E402
from app.ingest.mmlu_redux import import_mmlu_redux  # noqa: E402
from app.services.metrics.rankers import compute_rankers, rank_inputs  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.stats.bootstrap import group_bootstrap  # noqa: E402

METRICS = ("auroc", "auprc", "precision_at_100")


def main() -> None:
    """Import, rank, measure, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "mmlu-redux")
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="appellate-ranker-quality-") as tmp:
        settings = Settings(data_dir=Path(tmp))
        engine = make_engine(settings)
        migrate.upgrade(engine)
        factory = session_factory(engine)
        with transaction(factory) as session:
            import_mmlu_redux(session, [args.data], "mmlu")
        with factory() as session:
            inputs = rank_inputs(session, "mmlu")
        result = compute_rankers(inputs)
        engine.dispose()
    y = inputs.train
    names = list(result.scores)
    scores = np.stack([result.scores[n] for n in names])
    keep = ~np.isnan(y) & ~np.isnan(scores).any(axis=0)
    groups = np.asarray(inputs.matrix.groups, dtype=object)[keep]
    boot = group_bootstrap(
        y[keep].astype(int), scores[:, keep], groups, metrics=METRICS, resamples=args.resamples
    )
    base = names.index("consensus")
    rankers: dict[str, Any] = {}
    for j, name in enumerate(names):
        row: dict[str, Any] = {}
        for metric in METRICS:
            est = boot.estimate(metric, j)
            row[metric] = est.value
            row[f"{metric}_ci"] = est.ci
            if j != base:
                diff = boot.difference(metric, j, base)
                row[f"{metric}_minus_consensus"] = diff.estimate.value
                row[f"{metric}_minus_consensus_ci"] = diff.estimate.ci
                row[f"{metric}_better"] = diff.first_better
        rankers[name] = row
    print(
        json.dumps(
            {
                "reference": "the consensus ranker, paired on the same subject resamples",
                "items": int(keep.sum()),
                "defects": int(y[keep].sum()),
                "subjects": len(set(groups.tolist())),
                "resamples": args.resamples,
                "skipped": result.skipped,
                "rankers": rankers,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
