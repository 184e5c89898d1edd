"""CPU of a cold metrics computation (the ``compute_metrics`` job's) on N imported pairwise items.

For each database (``--databases``): a fresh store, N pairwise instances with three detectors and
N/4 groups imported with ``import_table`` (``seeding.py``; ``--text-chars`` per text), then
``--rounds`` interleaved rounds of the job's computation (``compute_result`` with the figures
drawn) of the default request (``reference``, every detector, ``--resamples`` resamples). Each
run is a fresh process, so nothing is warm: no in-process memo, no kept draws, no plan; its
client CPU (``time.process_time`` around the computation: the database server's time is not
counted) and wall time are reported, with the median CPU scaled linearly to 1,000,000 items
against the target (30 s of CPU at a million items on PostgreSQL).

With ``--base REV`` the same computation of a base revision (checked out into a temporary
``git worktree``) runs in the same rounds on the same store, order alternating; the report
then has the per-round CPU ratio base / current (median) and the largest difference between
the two reports' numbers.

    python benchmarks/metrics_job_bench.py [--n 100000] [--databases sqlite,postgresql]
        [--resamples 2000] [--rounds 3] [--base REV] [--text-chars 200]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# In a child run, the tree whose code is timed (this one, or a base revision's worktree).
TREE = Path(os.environ.get("METRICS_JOB_BENCH_TREE", ROOT))
if str(TREE) not in sys.path:
    sys.path.insert(0, str(TREE))

TARGET_CPU_S = 30.0
TARGET_N = 1_000_000


def _first(*modules: str) -> Any:
    """The first of ``modules`` that the tree under test has."""
    import importlib

    for name in modules[:-1]:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return importlib.import_module(modules[-1])


def child(url: str, resamples: int) -> dict[str, Any]:
    """One cold computation in this process: CPU and wall seconds, and the report."""
    import time

    from app.db import make_engine, session_factory
    from app.settings import Settings

    # A base revision from before the services were cut into wings has the flat module names.
    results = _first("app.services.metrics.metric_results", "app.services.metric_results")
    queries = _first("app.services.metrics.metrics_query", "app.services.metrics_query")
    plots = _first("app.services.metrics.svg_plots", "app.web.svg_plots")
    from benchmarks.seeding import BENCHMARK

    # The SQLite file's folder as the data folder (make_engine creates it, so not the cwd's).
    data_dir = Path(url.split(":///", 1)[1]).parent if url.startswith("sqlite") else TREE
    engine = make_engine(Settings(data_dir=data_dir, database_url=url))
    try:
        with session_factory(engine)() as session:
            query = queries.MetricsQuery(BENCHMARK, resamples=resamples)
            wall, cpu = time.perf_counter(), time.process_time()
            result = results.compute_result(session, query, draw=plots.metrics_figures)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        engine.dispose()
    return {"cpu_s": cpu, "wall_s": wall, "report": result.report}


def run_child(tree: Path, url: str, resamples: int) -> dict[str, Any]:
    """:func:`child` in a fresh process on ``tree``'s code."""
    env = {**os.environ, "METRICS_JOB_BENCH_TREE": str(tree), "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", url, str(resamples)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"metrics computation failed in {tree}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def largest_difference(a: Any, b: Any) -> float:
    """The largest absolute difference between the numbers of two equally shaped reports."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return max((largest_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return max((largest_difference(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return abs(float(a) - float(b))
    return 0.0 if a == b else math.inf


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def measure(url: str, trees: dict[str, Path], args: argparse.Namespace) -> dict[str, Any]:
    """Rounds of every tree's computation on the store at ``url`` (order alternating)."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    names = list(trees)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs[name].append(run_child(trees[name], url, args.resamples))
    out: dict[str, Any] = {}
    for name, done in runs.items():
        cpu = [d["cpu_s"] for d in done]
        median = statistics.median(cpu)
        out[name] = {
            "cpu_s": round(median, 3),
            "cpu_s_runs": [round(c, 3) for c in cpu],
            "wall_s_runs": [round(d["wall_s"], 3) for d in done],
            "cpu_s_at_1m_linear": round(median * TARGET_N / args.n, 1),
        }
    if "base" in runs:
        ratios = [
            b["cpu_s"] / c["cpu_s"] for b, c in zip(runs["base"], runs["current"], strict=True)
        ]
        out["cpu_ratio_base_over_current"] = round(statistics.median(ratios), 2)
        out["max_abs_difference_vs_base"] = largest_difference(
            runs["base"][-1]["report"], runs["current"][-1]["report"]
        )
    return out


def main() -> None:
    """Parse options, seed each database, time the computations and print the JSON report."""
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]))))
        return
    from benchmarks.seeding import import_pairwise, write_pairwise_csv
    from benchmarks.serving import fresh_store, load_average

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="pairwise instances")
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", default=None, help="also time this revision, alternating")
    parser.add_argument("--text-chars", type=int, default=200, help="characters per text")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "n": args.n,
        "groups": args.n // 4,
        "detectors": 3,
        "resamples": args.resamples,
        "rounds": args.rounds,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_before": load_average(),
        "target": {"cpu_s_under": TARGET_CPU_S, "at_n": TARGET_N, "database": "postgresql"},
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="appellate-metrics-job-bench-") as tmp:
        work = Path(tmp)
        trees = {"current": ROOT}
        if args.base:
            report["base"] = _git("rev-parse", args.base)
            trees["base"] = work / "base"
            _git("worktree", "add", "--detach", str(trees["base"]), report["base"])
        try:
            csv = work / "pairs.csv"
            write_pairwise_csv(csv, args.n, text_chars=args.text_chars)
            for dialect in args.databases.split(","):
                with fresh_store(dialect, work / dialect) as settings:
                    seeded = import_pairwise(settings, csv)
                    result = measure(settings.resolved_database_url, trees, args)
                    result["import"] = seeded
                    report["results"][dialect] = result
        finally:
            if args.base:
                _git("worktree", "remove", "--force", str(trees["base"]))
    report["load_average_after"] = load_average()
    pg = report["results"].get("postgresql", {}).get("current")
    if pg is not None:
        report["target"]["met_by_linear_extrapolation"] = pg["cpu_s_at_1m_linear"] < TARGET_CPU_S
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
