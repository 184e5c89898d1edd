"""Time AUROC + AUPRC + Brier with group-bootstrap intervals against a naive scikit-learn loop.

Prints one JSON object. Three methods run in interleaved rounds (the order rotates each round)
on the same data: ``vectorised`` (``app.stats.bootstrap.group_bootstrap``, all ``--resamples``),
``vectorised_same_resamples`` (the same engine on the first ``--naive-resamples`` resamples) and
``naive`` (per resample: materialise its items, call scikit-learn three times) on those same
resamples. The headline ``speedup`` is like with like: naive over vectorised on the same
resamples of the same rows, the median of the per-round ratios. The naive loop scaled linearly
to all resamples against the full vectorised run is reported beside it as an extrapolation
(``speedup_extrapolated``). Both paths draw the same resamples, so the benchmark also checks
that their replicates agree.

Reference: the naive scikit-learn loop (``naive_loop``), on the same rows and resamples.

Every round has its own seed (``--seed`` + 1 + round), the same for every method in that round,
so every method draws its resamples afresh each round: the engine keeps drawn resamples per
(seed, resamples, groups) for the detectors of one request (``app.stats.bootstrap``), which a
repeated seed would reuse from the second round on while the naive loop draws again. The
report counts the resamples each method drew in each round (the engine's draws counted where
it draws them, ``DrawCounter``); the naive loop and ``vectorised_same_resamples`` must draw
the same number. An untimed call of each method (two resamples on ``--seed``) first loads what
is loaded once per process (the compiled kernels).

    python benchmarks/metrics_bench.py [--n 100000] [--groups 25000] [--resamples 2000]
        [--naive-resamples 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.stats import bootstrap  # noqa: E402
from app.stats.bootstrap import group_bootstrap  # noqa: E402
from benchmarks.rounds import run_rounds  # noqa: E402

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
) -> np.ndarray:
    """Per resample: draw groups, gather their items, call scikit-learn. (metrics, resamples)."""
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
    return values


def vectorised(
    y: np.ndarray, p: np.ndarray, groups: np.ndarray, resamples: int, seed: int, threads: int | None
) -> tuple[dict[str, Any], np.ndarray]:
    """Intervals for all three metrics and the replicates, shape (metrics, resamples)."""
    result = group_bootstrap(
        y, p, groups, metrics=METRICS, resamples=resamples, seed=seed, n_threads=threads
    )
    intervals = {
        m: {"value": result.estimate(m).value, "ci": result.estimate(m).ci} for m in METRICS
    }
    replicates = np.stack([result.replicates[m][0] for m in METRICS])
    return intervals, replicates


class DrawCounter:
    """Counts the resamples the engine draws, installed in place of ``bootstrap._draw``.

    ``_draw`` is where the engine draws every resample it does not reuse (the kept draws and
    the chunked path both call it); the counter forwards each call and adds its resamples.
    """

    def __init__(self) -> None:
        self.drawn = 0
        self._draw = bootstrap._draw
        self._lock = threading.Lock()  # chunks draw in worker threads

    def __call__(self, seeds: Any, strata: Any, out: Any = None) -> Any:
        """``bootstrap._draw(seeds, strata, out)``, counting ``len(seeds)`` resamples."""
        with self._lock:
            self.drawn += len(seeds)
        return self._draw(seeds, strata, out)


def _paired(series: dict[str, list[float]], slow: str, fast: str) -> float:
    """Median over rounds of ``slow``'s time over ``fast``'s time in the same round."""
    pairs = zip(series[slow], series[fast], strict=True)
    return round(statistics.median(a / b for a, b in pairs), 1)


def main() -> None:
    """Parse options, run the methods in rotating rounds and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="items")
    parser.add_argument("--groups", type=int, default=25_000, help="groups (bootstrap units)")
    parser.add_argument("--resamples", type=int, default=2_000, help="bootstrap resamples")
    parser.add_argument(
        "--naive-resamples", type=int, default=50, help="resamples timed in the naive loop"
    )
    parser.add_argument("--rounds", "--repeats", type=int, default=3, help="timed rounds")
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
    naive_b = min(args.naive_resamples, args.resamples)
    rounds = max(1, args.rounds)
    round_seeds = [args.seed + 1 + r for r in range(rounds)]
    counter = DrawCounter()
    bootstrap._draw = counter  # type: ignore[assignment]

    def engine(b: int) -> Callable[[int], tuple[Any, int]]:
        def run(seed: int) -> tuple[Any, int]:
            before = counter.drawn
            return vectorised(y, p, groups, b, seed, args.threads), counter.drawn - before

        return run

    def naive(seed: int) -> tuple[Any, int]:
        values = naive_loop(y, p, groups, naive_b, seed)
        return values, values.shape[1]  # one generator drawn per resample

    bodies = {
        "vectorised": engine(args.resamples),
        "vectorised_same_resamples": engine(naive_b),
        "naive": naive,
    }
    # Untimed, on a seed no round uses: loads the compiled kernels (a first call's cost).
    vectorised(y, p, groups, 2, args.seed, args.threads)
    naive_loop(y, p, groups, 2, args.seed)
    # run_rounds calls each method once per round: each takes the next round's seed.
    seeds_left = {name: iter(round_seeds) for name in bodies}
    seeds_used: dict[str, list[int]] = {name: [] for name in bodies}
    drawn: dict[str, list[int]] = {name: [] for name in bodies}

    def timed(name: str) -> Callable[[], Any]:
        def run() -> Any:
            seed = next(seeds_left[name])
            out, count = bodies[name](seed)
            seeds_used[name].append(seed)
            drawn[name].append(count)
            return out

        return run

    wall, cpu, outputs = run_rounds({name: timed(name) for name in bodies}, rounds)
    intervals, replicates = outputs["vectorised"]
    agreement = float(np.nanmax(np.abs(outputs["naive"] - replicates[:, :naive_b])))
    full = statistics.median(wall["vectorised"])
    naive_s = statistics.median(wall["naive"])
    extrapolated = [
        n * args.resamples / naive_b / v
        for n, v in zip(wall["naive"], wall["vectorised"], strict=True)
    ]
    speedup = _paired(wall, "naive", "vectorised_same_resamples")

    report = {
        "n": args.n,
        "groups": args.groups,
        "resamples": args.resamples,
        "prevalence": float(y.mean()),
        "distinct_scores": int(np.unique(p).size),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "threads": args.threads,
        "rounds": rounds,
        "reference": f"naive scikit-learn loop on the same {naive_b} resamples of the same rows",
        "round_seeds": round_seeds,
        "seeds_by_method": seeds_used,
        "resamples_drawn_per_round": drawn,
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "vectorised": {
            "metrics": list(METRICS),
            "wall_s": round(full, 3),
            "wall_s_runs": [round(w, 3) for w in wall["vectorised"]],
            "cpu_s_runs": [round(c, 3) for c in cpu["vectorised"]],
            "intervals": intervals,
        },
        "vectorised_same_resamples": {
            "resamples": naive_b,
            "wall_s": round(statistics.median(wall["vectorised_same_resamples"]), 4),
            "wall_s_runs": [round(w, 4) for w in wall["vectorised_same_resamples"]],
        },
        "naive": {
            "resamples": naive_b,
            "wall_s": round(naive_s, 3),
            "wall_s_runs": [round(w, 3) for w in wall["naive"]],
            "per_resample_s": round(naive_s / naive_b, 4),
        },
        "speedup": speedup,
        "speedup_basis": f"naive / vectorised, both on the same {naive_b} resamples",
        "speedup_cpu": _paired(cpu, "naive", "vectorised_same_resamples"),
        "speedup_extrapolated": round(statistics.median(extrapolated), 1),
        "speedup_extrapolated_basis": (
            f"naive on {naive_b} resamples scaled linearly to {args.resamples} / vectorised on "
            f"{args.resamples} (an estimate: the naive loop never ran that many)"
        ),
        "max_abs_difference_vs_naive": agreement,
        "targets": {
            "speedup_at_least": TARGET_SPEEDUP,
            "wall_s_under": TARGET_WALL_S,
            "speedup_met": speedup >= TARGET_SPEEDUP,
            "wall_met": full < TARGET_WALL_S,
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
