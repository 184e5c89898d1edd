"""CPU of a cold metrics computation (the ``compute_metrics`` job's) on N imported pairwise items.

For each database (``--databases``): a fresh store, N pairwise instances with three detectors and
N/4 groups imported with ``import_table`` (``seeding.py``; ``--text-chars`` per text), then
``--rounds`` interleaved rounds of the job's computation (``compute_result`` with the figures
drawn) of the default request (``reference``, every detector, ``--resamples`` resamples). Each
run is a fresh process, so nothing in memory is warm: no in-process memo, no kept draws, no
plan; the on-disk caches (bytecode, compiled kernels) are, for both trees, written by one
untimed run of each before the rounds. Per run: its client CPU (``time.process_time`` around
the computation), the database server's CPU (PostgreSQL: the CPU of the database's backends,
read from ``/proc`` while the run lasts, from the process's start to the end of its
computation, ``db_cpu.py``; SQLite runs in the client process, so its CPU is already the
client's and ``database_cpu_s`` is ``null``), their sum (``total_cpu_s``) and the wall time;
the medians scaled linearly to 1,000,000 items against the target (30 s of CPU at a million
items on PostgreSQL, client plus database server).

Reference: with ``--base REV`` the same computation of a base revision (checked out into a
temporary ``git worktree``, run on its own code: module paths of the base are looked up under
both layouts, :func:`_first`) runs in the same rounds on the same store, order alternating,
measured the same way; the report then has the per-round ratios base / current (median) of
the client CPU and of the total CPU, and the largest difference between the two reports'
numbers. Without ``--base``, the reference is the absolute target alone.

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

# benchmarks/ (this script's folder) is on sys.path; the child's TREE, first, has no db_cpu.
from db_cpu import POSTGRES_BASIS, SQLITE_BASIS, hand_back, run_metered  # noqa: E402

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


def child(url: str, resamples: int) -> None:
    """One cold computation in this process: CPU and wall seconds and the report, handed back.

    The connection stays open until the parent has read the database server's CPU
    (:func:`db_cpu.hand_back`).
    """
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
            hand_back({"cpu_s": cpu, "wall_s": wall, "report": result.report})
    finally:
        engine.dispose()


def run_child(tree: Path, url: str, resamples: int) -> dict[str, Any]:
    """:func:`child` in a fresh process on ``tree``'s code, with the database server's CPU.

    ``database_cpu_s``: the CPU of the database's PostgreSQL backends from the child's start
    to the end of its computation (``db_cpu.run_metered``); ``None`` on SQLite, which runs in
    the child and is counted in its ``cpu_s``.
    """
    env = {**os.environ, "METRICS_JOB_BENCH_TREE": str(tree), "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", url, str(resamples)]
    done, database_s = run_metered(cmd, url, cwd=tree, env=env)
    return {**done, "database_cpu_s": database_s}


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
        database = [d["database_cpu_s"] for d in done]
        total = [c + (d or 0.0) for c, d in zip(cpu, database, strict=True)]
        out[name] = {
            "cpu_s": round(statistics.median(cpu), 3),
            "cpu_s_runs": [round(c, 3) for c in cpu],
            "database_cpu_s": None if None in database else round(statistics.median(database), 3),
            "database_cpu_s_runs": [None if d is None else round(d, 3) for d in database],
            "total_cpu_s": round(statistics.median(total), 3),
            "wall_s_runs": [round(d["wall_s"], 3) for d in done],
            "cpu_s_at_1m_linear": round(statistics.median(cpu) * TARGET_N / args.n, 1),
            "total_cpu_s_at_1m_linear": round(statistics.median(total) * TARGET_N / args.n, 1),
        }
    if "base" in runs:
        for key, ratio in (("cpu_s", "cpu_ratio"), ("total", "total_cpu_ratio")):
            ratios = [
                _cpu(b, key) / _cpu(c, key)
                for b, c in zip(runs["base"], runs["current"], strict=True)
            ]
            out[f"{ratio}_base_over_current"] = round(statistics.median(ratios), 2)
        out["max_abs_difference_vs_base"] = largest_difference(
            runs["base"][-1]["report"], runs["current"][-1]["report"]
        )
    return out


def _cpu(run: dict[str, Any], key: str) -> float:
    """A run's client CPU (``cpu_s``) or client plus database server CPU (``total``)."""
    return run["cpu_s"] + (run["database_cpu_s"] or 0.0) if key == "total" else run["cpu_s"]


def main() -> None:
    """Parse options, seed each database, time the computations and print the JSON report."""
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
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
        "reference": (
            f"base revision {args.base}, same rounds and store" if args.base else "target only"
        ),
        "database_cpu_basis": {"postgresql": POSTGRES_BASIS, "sqlite": SQLITE_BASIS},
        "target": {
            "total_cpu_s_under": TARGET_CPU_S,
            "at_n": TARGET_N,
            "database": "postgresql",
            "counts": "client CPU + database server CPU",
        },
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
            for k, dialect in enumerate(args.databases.split(",")):
                with fresh_store(dialect, work / dialect) as settings:
                    seeded = import_pairwise(settings, csv)
                    if k == 0:
                        # Untimed: each tree writes its bytecode and compiled-kernel caches
                        # (a fresh base worktree has none), which every later run reads.
                        for tree in trees.values():
                            run_child(tree, settings.resolved_database_url, args.resamples)
                    result = measure(settings.resolved_database_url, trees, args)
                    result["import"] = seeded
                    report["results"][dialect] = result
        finally:
            if args.base:
                _git("worktree", "remove", "--force", str(trees["base"]))
    report["load_average_after"] = load_average()
    pg = report["results"].get("postgresql", {}).get("current")
    if pg is not None:
        report["target"]["met_by_linear_extrapolation"] = (
            pg["total_cpu_s_at_1m_linear"] < TARGET_CPU_S
        )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
