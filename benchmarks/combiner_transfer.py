"""Does the learned combiner transfer to subjects whose verdicts it never saw? Prints JSON.

Every MMLU-Redux subject in ``../shared/data/mmlu-redux`` (or ``--data``) is imported into one
benchmark of a fresh SQLite store; a seeded split of the subjects withholds the expert defect
labels of half of them (their ``defect``/``errata`` events are deleted). The rank-errors
pipeline then runs as the job does (:func:`rank_inputs`, :func:`compute_rankers`): the combiner
learns from the other half and scores every item. On the withheld half, against the withheld
verdicts: AUROC, AUPRC and P@100 of the combiner and of every ranker, with group-bootstrap
intervals (groups = subjects), and the paired difference combiner - consensus.

    python benchmarks/combiner_transfer.py [--seed 0] [--resamples 2000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import delete, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import migrate  # noqa: E402
from app.db import make_engine, session_factory, transaction  # noqa: E402
from app.ingest.mmlu_redux import import_mmlu_redux  # noqa: E402
from app.services.metrics.rankers import compute_rankers, rank_inputs  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.stats.bootstrap import group_bootstrap  # noqa: E402
from app.tables import Instance, LabelEvent  # noqa: E402

METRICS = ("auroc", "auprc", "precision_at_100")


def _estimate(est: Any) -> dict[str, float | None]:
    return {"value": est.value, "low": est.low, "high": est.high}


def main() -> None:
    """Run the transfer and print its figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/mmlu-redux")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args()
    files = sorted(args.data.glob("*.csv"))
    subjects = [f.stem for f in files]
    rng = np.random.default_rng(args.seed)
    withheld = sorted(rng.choice(subjects, size=len(subjects) // 2, replace=False).tolist())
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), database_url=f"sqlite:///{tmp}/bench.sqlite3")
        engine = make_engine(settings)
        migrate.upgrade(engine)
        factory = session_factory(engine)
        with transaction(factory) as s:
            import_mmlu_redux(s, files, "mmlu")
            truth = dict(
                s.execute(
                    select(LabelEvent.instance_id, LabelEvent.value).where(
                        LabelEvent.label_name == "defect"
                    )
                ).all()
            )
            held = select(Instance.id).where(Instance.group_key.in_(withheld))
            s.execute(
                delete(LabelEvent).where(
                    LabelEvent.instance_id.in_(held),
                    LabelEvent.label_name.in_(["defect", "errata"]),
                )
            )
        with transaction(factory) as s:
            inputs = rank_inputs(s, "mmlu")
        started = time.perf_counter()
        result = compute_rankers(inputs)
        seconds = time.perf_counter() - started
        engine.dispose()
    m = inputs.matrix
    groups = np.asarray(m.groups)
    test = np.isin(groups, withheld)
    y = np.array([int(truth[int(i)]) for i in m.instance_ids[test]])
    names = list(result.scores)
    scores = [result.scores[n][test] for n in names]
    boot = group_bootstrap(
        y, scores, groups[test], metrics=METRICS, resamples=args.resamples, seed=args.seed
    )
    c, k = names.index("combined"), names.index("consensus")
    fitted = inputs.fitted["combined"]
    print(
        json.dumps(
            {
                "subjects": len(subjects),
                "items": len(m.instance_ids),
                "withheld_subjects": withheld,
                "train_items": int((~test).sum()),
                "test_items": int(test.sum()),
                "test_defects": int(y.sum()),
                "combiner_scored_items": int(np.isfinite(result.scores["combined"]).sum()),
                "combiner_folds": fitted["folds"],
                "combiner_fingerprint": {
                    k2: v for k2, v in fitted["fingerprint"].items() if k2 != "features"
                },
                "combiner_features": len(fitted["fingerprint"]["features"]),
                "rank_seconds": round(seconds, 2),
                "withheld_half": {
                    name: {mt: _estimate(boot.estimate(mt, i)) for mt in METRICS}
                    for i, name in enumerate(names)
                },
                "combined_minus_consensus": {
                    mt: {
                        **_estimate(boot.difference(mt, c, k).estimate),
                        "share_better": boot.difference(mt, c, k).first_better,
                    }
                    for mt in METRICS
                },
                "resamples": args.resamples,
                "seed": args.seed,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
