"""The LLM critic on MMLU-Redux: how well a local model's verdicts find the expert-marked defects.

Imports the MMLU-Redux subjects of ``--data`` (all of them, or ``--subjects``) into a fresh
SQLite store, ranks them with the label-error rankers (as the demo does), registers the model
and runs the ``critic`` job on a seeded sample of ``--items`` items in each ``--modes`` mode,
through the same worker path as ``appellate critic``. For each run it reports the retention
(items with a valid verdict / items asked, and the reasons of the others), the job's wall
time, and the critic's AUROC and AUPRC against the expert ``defect`` label with the metrics
page's group-bootstrap 95% intervals (subject-level groups as imported), beside the base rate
and the ``consensus`` ranker's AUROC/AUPRC on the same scored items.

Reference: scikit-learn's ``roc_auc_score`` / ``average_precision_score`` on the same scores
must equal the reported point values; ``consensus`` on the same items is the baseline.

    python benchmarks/critic_bench.py [--data ../shared/data/mmlu-redux] [--items 100]
        [--modes forced,generate] [--model-dir DIR] [--subjects a,b] [--max-new-tokens 256]
        [--batch-size 8] [--resamples 2000] [--seed 0]

Without ``--model-dir`` the bundled SmolLM2-135M-Instruct is converted into the temporary store
(about 30 s).
"""

from __future__ import annotations

import argparse
import json
import os
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
from sqlalchemy import select  # noqa: E402

from app.db import transaction  # noqa: E402
from app.ingest.mmlu_redux import import_mmlu_redux  # noqa: E402
from app.services.evidence.detectors import RANKER_PREFIX  # noqa: E402
from app.services.evidence.labels import current_labels  # noqa: E402
from app.services.evidence.language_models import register_language_model  # noqa: E402
from app.services.jobs import queue as job_queue  # noqa: E402
from app.services.jobs.critic import CriticParams  # noqa: E402
from app.services.jobs.kind import enqueue  # noqa: E402
from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers  # noqa: E402
from app.services.metrics.report import metrics_report  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.store import Store  # noqa: E402
from app.tables import Detector, Score  # noqa: E402

BENCHMARK = "mmlu-redux"


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "mmlu-redux")
    parser.add_argument("--subjects", default="", help="Comma-separated file stems (default all).")
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--modes", default="forced")
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def _scores(store: Store, detector: str) -> dict[int, float]:
    with transaction(store.factory) as s:
        q = (
            select(Score.instance_id, Score.score)
            .join(Detector, Detector.id == Score.detector_id)
            .where(Detector.name == detector)
        )
        return {int(i): float(v) for i, v in s.execute(q)}


def _point(y: np.ndarray, p: np.ndarray) -> dict[str, float | None]:
    if len(set(y.tolist())) < 2:
        return {"auroc": None, "auprc": None}
    return {
        "auroc": float(roc_auc_score(y, p)),
        "auprc": float(average_precision_score(y, p)),
    }


def run_mode(store: Store, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    """One critic run and its figures against ``defect``."""
    from workers.dispatch import HANDLERS
    from workers.runner import Worker

    params = CriticParams(
        benchmark=BENCHMARK, model="critic-model", detector=f"critic:{mode}", mode=mode,
        limit=args.items, seed=args.seed, max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
    )  # fmt: skip
    with transaction(store.factory) as s:
        job_id = enqueue(s, params).id
    started = time.perf_counter()
    Worker(store, HANDLERS, device="cpu", log=lambda _: None).run(once=True)
    wall = time.perf_counter() - started
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
        if job.status != "done":
            raise SystemExit(f"critic job failed: {job.error}")
        result = dict(job.result or {})
        report = metrics_report(
            s, BENCHMARK, "defect", [params.detector], resamples=args.resamples, seed=0
        )
    critic = _scores(store, params.detector)
    consensus = _scores(store, RANKER_PREFIX + "consensus")
    ids = sorted(critic)
    with transaction(store.factory) as s:
        defect = current_labels(s, ids, ["defect"])
    kept = [i for i in ids if "defect" in defect.get(i, {})]
    y = np.array([int(defect[i]["defect"]) for i in kept])
    p = np.array([critic[i] for i in kept])
    (row,) = [r for r in report["rows"] if r["slice"] is None]
    mine = _point(y, p)
    for name in ("auroc", "auprc"):
        if mine[name] is not None and row[name] is not None:
            assert abs(mine[name] - row[name]) < 1e-9, (name, mine[name], row[name])
    return {
        "mode": mode,
        "job_wall_s": round(wall, 1),
        "items": result["items"],
        "scored": result["scored"],
        "retention": result["retention"],
        "with_probability": result["with_probability"],
        "invalid": result["invalid"],
        "invalid_examples": result["invalid_examples"],
        "defects_scored": int(y.sum()),
        "base_rate": float(y.mean()) if len(y) else None,
        "n": row["n"],
        "auroc": row["auroc"],
        "auroc_ci": row.get("auroc_ci"),
        "auprc": row["auprc"],
        "auprc_ci": row.get("auprc_ci"),
        "sklearn": mine,
        "consensus_same_items": _point(y, np.array([consensus[i] for i in kept])),
        "score_quantiles": np.quantile(p, [0, 0.25, 0.5, 0.75, 1]).round(4).tolist()
        if len(p)
        else None,
    }


def main() -> None:
    """Build the store, run the critic in each mode, print one JSON object."""
    args = _args()
    with tempfile.TemporaryDirectory(prefix="critic-bench-") as tmp:
        work = Path(tmp)
        settings = Settings(data_dir=work, database_url=f"sqlite:///{work / 'bench.sqlite3'}")
        store = Store.open(settings)
        try:
            from workers.engines.models import convert_smollm2, describe_model

            model_dir = args.model_dir or convert_smollm2(work)
            info = describe_model(model_dir)
            files = (
                [args.data / f"{name}.csv" for name in args.subjects.split(",")]
                if args.subjects
                else [args.data]
            )
            with transaction(store.factory) as s:
                summary = import_mmlu_redux(s, files, BENCHMARK)
                register_language_model(
                    s, "critic-model", path=str(model_dir), fingerprint=info.fingerprint,
                    dtype="float32",
                )  # fmt: skip
            with transaction(store.factory) as s:
                inputs = rank_inputs(s, BENCHMARK)
            ranked = compute_rankers(inputs, ["consensus"])
            with transaction(store.factory) as s:
                store_rankers(s, inputs, ranked)
            runs = [run_mode(store, args, m) for m in args.modes.split(",")]
        finally:
            store.close()
    report = {
        "reference": "scikit-learn AUROC/AUPRC on the same scores; consensus on the same items",
        "model": str(args.model_dir or "bundled SmolLM2-135M-Instruct"),
        "data": str(args.data),
        "subjects": args.subjects or "all",
        "imported": summary.line(),
        "sample": {"items": args.items, "seed": args.seed},
        "torch_threads": os.environ.get("OMP_NUM_THREADS", "default"),
        "load_average": os.getloadavg()[0],
        "runs": runs,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
