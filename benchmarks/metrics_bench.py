"""Time AUROC + AUPRC + Brier with group-bootstrap intervals against a naive scikit-learn loop.

Prints one JSON object. The vectorised engine (``app.stats.bootstrap.group_bootstrap``) runs all
resamples; the naive loop (materialise each resample's items, call scikit-learn three times) runs
on a few resamples and is scaled linearly. Both use the same resamples, so the benchmark also
checks that their replicates agree.

    python benchmarks/metrics_bench.py [--n 100000] [--groups 25000] [--resamples 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import numpy as np
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

from app.stats.bootstrap import group_bootstrap

METRICS = ("auroc", "auprc", "brier")
TARGET_SPEEDUP = 30.0
TARGET_WALL_S = 5.0


def make_data(
    n: int, n_groups: int, seed: int, decimals: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic labels and probabilities with a shared per-group effect (so groups matter)."""
    rng = np.random.default_rng(seed)
    # Every group gets at least one item, the rest land at random.
    codes = np.concatenate([np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)])
    rng.shuffle(codes)
    effect = rng.normal(size=n_groups)[codes]
    y = rng.random(n) < 1.0 / (1.0 + np.exp(-(effect - 0.6)))
    p = 1.0 / (1.0 + np.exp(-(0.8 * effect + rng.normal(size=n))))
    if decimals is not None:
        p = np.round(p, decimals)
    groups = np.char.add("q", codes.astype(str))
    return y, p, groups


def naive_loop(
    y: np.ndarray, p: np.ndarray, groups: np.ndarray, resamples: int, seed: int
) -> tuple[float, np.ndarray]:
    """Per resample: draw groups, gather their items, call scikit-learn. Returns (s, values)."""
    start = time.perf_counter()
    keys, codes = np.unique(groups, return_inverse=True)
    n_groups = keys.size
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(n_groups + 1))
    members = [order[bounds[g] : bounds[g + 1]] for g in range(n_groups)]
    # The same per-resample streams as group_bootstrap, so the replicates can be compared.
    children = np.random.SeedSequence(seed).spawn(resamples)
    values = np.empty((len(METRICS), resamples))
    for b, child in enumerate(children):
        drawn = np.random.Generator(np.random.PCG64(child)).integers(0, n_groups, size=n_groups)
        index = np.concatenate([members[g] for g in drawn])
        ys, ps = y[index], p[index]
        values[0, b] = roc_auc_score(ys, ps)
        values[1, b] = average_precision_score(ys, ps)
        values[2, b] = brier_score_loss(ys, ps)
    return time.perf_counter() - start, values


def vectorised(
    y: np.ndarray, p: np.ndarray, groups: np.ndarray, resamples: int, seed: int, threads: int | None
) -> tuple[float, float, dict[str, Any], np.ndarray]:
    """Intervals for all three metrics. Returns (wall s, cpu s, intervals, replicates)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = group_bootstrap(
        y, p, groups, metrics=METRICS, resamples=resamples, seed=seed, n_threads=threads
    )
    intervals = {
        m: {"value": result.estimate(m).value, "ci": result.estimate(m).ci} for m in METRICS
    }
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    replicates = np.stack([result.replicates[m][0] for m in METRICS])
    return wall, cpu, intervals, replicates


def main() -> None:
    """Parse options, run both paths and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="items")
    parser.add_argument("--groups", type=int, default=25_000, help="groups (bootstrap units)")
    parser.add_argument("--resamples", type=int, default=2_000, help="bootstrap resamples")
    parser.add_argument(
        "--naive-resamples", type=int, default=50, help="resamples timed in the naive loop"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of the fast path")
    parser.add_argument("--threads", type=int, default=None, help="worker threads (default: cores)")
    parser.add_argument(
        "--decimals", type=int, default=None, help="round scores (creates ties); default: none"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 1 <= args.groups <= args.n:
        parser.error("--groups must be between 1 and --n")

    y, p, groups = make_data(args.n, args.groups, args.seed, args.decimals)
    load_before = os.getloadavg()[0]

    runs = [
        vectorised(y, p, groups, args.resamples, args.seed, args.threads)
        for _ in range(max(1, args.repeats))
    ]
    walls = [r[0] for r in runs]
    wall = statistics.median(walls)
    _, _, intervals, replicates = runs[0]

    naive_b = min(args.naive_resamples, args.resamples)
    naive_s, naive_values = naive_loop(y, p, groups, naive_b, args.seed)
    naive_scaled = naive_s * args.resamples / naive_b
    speedup = naive_scaled / wall
    agreement = float(np.nanmax(np.abs(naive_values - replicates[:, :naive_b])))

    report = {
        "n": args.n,
        "groups": args.groups,
        "resamples": args.resamples,
        "prevalence": float(y.mean()),
        "distinct_scores": int(np.unique(p).size),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "threads": args.threads,
        "load_average_before": round(load_before, 2),
        "vectorised": {
            "metrics": list(METRICS),
            "wall_s": round(wall, 3),
            "wall_s_runs": [round(w, 3) for w in walls],
            "cpu_s_runs": [round(r[1], 3) for r in runs],
            "intervals": intervals,
        },
        "naive": {
            "resamples_measured": naive_b,
            "wall_s_measured": round(naive_s, 3),
            "per_resample_s": round(naive_s / naive_b, 4),
            "wall_s_scaled": round(naive_scaled, 2),
        },
        "speedup": round(speedup, 1),
        "max_abs_difference_vs_naive": agreement,
        "targets": {
            "speedup_at_least": TARGET_SPEEDUP,
            "wall_s_under": TARGET_WALL_S,
            "speedup_met": speedup >= TARGET_SPEEDUP,
            "wall_met": wall < TARGET_WALL_S,
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
