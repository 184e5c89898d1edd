"""Label-error rankers through the store against their numpy kernels on the same arrays.

Seeds a fresh store (SQLite and/or PostgreSQL) through ``import_table`` with N four-option items in
G groups, M models' answers (model j right with probability 0.55 + 0.4 j / M, else a random
option; 2% unanswered) and a reference label that is wrong on about 5% of the items (the binary
``defect`` label says where). Then, in interleaved rounds (``rounds.py``):

- every ranker through the service (``compute_rankers(inputs, [name])`` on the job's inputs)
  beside its kernel called on the same arrays (``label_errors`` / ``crowd_rankers``): the consensus
  ranker's target is within 3x of numpy's ``consensus_scores``;
- the whole rank-errors job (its read, every ranker and the combiner, its write) beside the sum of
  its kernels' times: target within 3x;
- the ``cleanlab`` disagreement mode on an imported ``critic`` detector against ``defect`` (the
  list a page asks for, ranked directly) beside ``cleanlab.filter.find_label_issues`` on the same
  labels and probabilities, wall time and peak traced memory (tracemalloc): target within 2x
  (time), measured after the benchmark's warm-up kept its label columns and scores
  (``cleanlab_mode_s``, as every request after the import's warm-up finds them) and before
  (``cleanlab_mode_from_rows_s``, the first request after the evidence changed, reading rows).

Reference: the numpy kernels and cleanlab on the same arrays. Prints one JSON object::

    python benchmarks/ranker_bench.py [--n 100000] [--models 20] [--groups 25000] [--rounds 3]
        [--databases sqlite,postgresql]
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
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.db import make_engine, session_factory, transaction  # noqa: E402
from app.ingest.table import import_table  # noqa: E402
from app.services.disagreements.disagreement_results import ListRequest, rank_directly  # noqa: E402
from app.services.disagreements.modes import get_mode  # noqa: E402
from app.services.metrics.rankers import (  # noqa: E402
    RANKERS,
    RankInputs,
    compute_rankers,
    rank_inputs,
    store_rankers,
)
from app.stats import crowd_rankers as cr  # noqa: E402
from app.stats import label_errors as le  # noqa: E402
from benchmarks.rounds import run_rounds  # noqa: E402
from benchmarks.serving import fresh_store  # noqa: E402

MODE_DETECTOR = "critic"
"""The detector whose scores the cleanlab mode reads: an imported P(defect) that overlaps between
the classes (0.2 + 0.45 defect + N(0, 0.18), clipped), so that confident learning lists hundreds
of items. The rankers' scores of these items separate the classes so well (20 models) that
cleanlab lists none of them, and an empty list measures no ranking."""

TARGETS = {"consensus_vs_numpy": 3.0, "job_vs_kernels": 3.0, "cleanlab_mode_vs_cleanlab": 2.0}


def seed_csv(path: Path, n: int, models: int, groups: int, seed: int = 0) -> None:
    """Write the benchmark's CSV (see the module docstring)."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 4, n)
    wrong = rng.random(n) < 0.05
    label = np.where(wrong, (truth + rng.integers(1, 4, n)) % 4, truth)
    skill = 0.55 + 0.4 * np.arange(models) / models
    right = rng.random((n, models)) < skill
    answers = np.where(right, truth[:, None], rng.integers(0, 4, (n, models)))
    missing = rng.random((n, models)) < 0.02
    critic = np.clip(0.2 + 0.45 * wrong + rng.normal(0.0, 0.18, n), 0.001, 0.999)
    group = np.concatenate([np.arange(groups), rng.integers(0, groups, n - groups)])
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        names = [f"m{j:02d}" for j in range(models)]
        writer.writerow(
            ["id", "group", "question", "a", "b", "c", "d", "gold", "defect", "critic", *names]
        )
        for i in range(n):
            row = [f"q{i:07d}", f"g{group[i]:06d}", f"question {i}", "w", "x", "y", "z"]
            cells = ["" if missing[i, j] else "ABCD"[answers[i, j]] for j in range(models)]
            writer.writerow([*row, "ABCD"[label[i]], int(wrong[i]), f"{critic[i]:.4f}", *cells])


def _kernels(inputs: RankInputs) -> dict[str, Callable[[], Any]]:
    """Each ranker's kernel on the arrays the service computed from (read once, outside)."""
    ev = inputs.evidence
    sv, y, k, nopt, codes = ev.votes, ev.labels, ev.n_classes, ev.n_options, ev.answers
    dist = cr.ensemble_distribution(sv)
    n = y.size
    correct = np.where(sv.answered, sv.votes[np.arange(n), :, y], np.nan)
    weighted = le.weighted_consensus_scores(codes, y, k, dist)[0]
    cleanlab = le.cleanlab_scores(y, dist)
    train = inputs.train[ev.ok]
    trained = ~np.isnan(train)
    groups = np.asarray(inputs.matrix.groups, dtype=object)[ev.ok][trained]

    def combined() -> Any:
        features = le.ranker_features(codes, y, k, weighted=weighted, cleanlab=cleanlab)
        rows = le.RankerFeatures(features.names, features.values[trained])
        return le.combine_rankers(rows, train[trained].astype(int), groups)

    return {
        # Plain consensus with its exact ties ordered by the plurality against the label, as
        # the ranker serves it.
        "consensus": lambda: cr.tie_break(*cr.hard_consensus(codes, y, k)),
        "weighted-consensus": lambda: le.weighted_consensus_scores(codes, y, k, dist),
        "cleanlab": lambda: le.cleanlab_scores(y, dist),
        "dawid-skene": lambda: cr.dawid_skene(sv, nopt),
        "one-coin": lambda: cr.one_coin(sv, nopt),
        "item-response": lambda: cr.rasch(correct),
        "combined": combined,
    }


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def _peak(fn: Callable[[], Any]) -> float:
    """Peak traced memory of one run of ``fn``, MiB."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def run_database(dialect: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Seed one store and measure everything on it."""
    out: dict[str, Any] = {}
    with fresh_store(dialect, work / dialect) as settings:
        engine = make_engine(settings)
        factory = session_factory(engine)
        t0 = time.perf_counter()
        with transaction(factory) as session:
            import_table(
                session, work / "items.csv", "choice", {"question": "question"},
                id_column="id", group="group", labels={"reference": "gold", "defect": "defect"},
                option_columns=dict(zip("ABCD", "abcd", strict=True)),
                answers={f"m{j:02d}": f"m{j:02d}" for j in range(args.models)}, benchmark="big",
                scores={MODE_DETECTOR: "critic"},
            )  # fmt: skip
        out["seed_import_s"] = round(time.perf_counter() - t0, 1)

        def read() -> RankInputs:
            with factory() as session:
                return rank_inputs(session, "big")

        def job() -> dict[str, Any]:
            inputs = read()
            result = compute_rankers(inputs)
            with transaction(factory) as session:
                return store_rankers(session, inputs, result)

        inputs = read()
        kernels = _kernels(inputs)
        methods: dict[str, Callable[[], Any]] = {"read": read}
        if not args.no_job:
            methods["job"] = job
        for name in RANKERS:
            if name in args.skip or name not in kernels:
                continue
            # A fresh copy: its soft votes are built inside the timed call. The combiner reads
            # the rankers before it (compute_rankers runs them); the others are their compute.
            if name == "combined":
                methods[f"ranker:{name}"] = lambda: compute_rankers(
                    replace(inputs), ["combined"]
                ).scores["combined"]
            else:
                methods[f"ranker:{name}"] = lambda name=name: RANKERS[name].compute(
                    replace(inputs), {}
                )
        for name, fn in kernels.items():
            if name not in args.skip:
                methods[f"kernel:{name}"] = fn
        wall, _cpu, outputs = run_rounds(methods, args.rounds)
        rankers = {}
        for name in RANKERS:
            if f"ranker:{name}" not in wall:
                continue
            row: dict[str, Any] = {"service_s": _median(wall[f"ranker:{name}"])}
            row["kernel_s"] = _median(wall[f"kernel:{name}"])
            row["ratio"] = round(row["service_s"] / max(row["kernel_s"], 1e-9), 2)
            rankers[name] = row
        # The consensus ranker's own scores beside numpy's on the same arrays.
        plain = outputs["kernel:consensus"]
        served = outputs["ranker:consensus"][inputs.evidence.ok]
        out["consensus_max_abs_diff_vs_numpy"] = float(np.abs(served - plain).max())
        # The job's kernels: every ranker's, measured here (or in an earlier run: --kernels-s).
        kernel_total = args.kernels_s or sum(rankers[n]["kernel_s"] for n in rankers)
        out["rankers"] = rankers
        out["read_s"] = _median(wall["read"])
        if not args.no_job:
            out["job_s"] = _median(wall["job"])
            out["kernels_s"] = round(kernel_total, 4)
            out["job_vs_kernels"] = round(out["job_s"] / kernel_total, 2)
        out["consensus_vs_numpy"] = rankers["consensus"]["ratio"]
        out.update(cleanlab_mode(factory, args.rounds))
        engine.dispose()
    out["under_targets"] = {k: out[k] <= v for k, v in TARGETS.items() if k in out}
    return out


def keep_columns(factory: Any, benchmark: str) -> None:
    """What the benchmark's warm-up job keeps of its evidence: label columns, scores, orders."""
    from app.services.evidence.benchmarks import get_benchmark
    from app.services.jobs.warm_up import WarmUpParams
    from app.sql.kept_arrays import keep_arrays

    with factory() as session:
        reads = WarmUpParams(benchmark).kept_reads(session)
    for name, read in reads:
        with factory() as session:
            bench = get_benchmark(session, benchmark)
            arrays = read(session, bench)
        with transaction(factory) as session:
            keep_arrays(session, bench, name, arrays)


def cleanlab_mode(factory: Any, rounds: int) -> dict[str, Any]:
    """The cleanlab disagreement mode beside ``find_label_issues`` on the same arrays."""
    from cleanlab.filter import find_label_issues

    from app.services.evidence.benchmarks import get_benchmark
    from app.services.evidence.labelled_items import detector_scores, get_detector, load_labelled

    spec = get_mode("cleanlab")
    detector = MODE_DETECTOR
    params = spec.settle([detector], {})
    request = ListRequest.of(spec, [detector], "defect", None, params)
    with factory() as session:
        items = load_labelled(session, "big", "defect")
        p = detector_scores(session, get_detector(session, detector), items)
    y = items.y.astype(np.int64)
    probs = np.column_stack([1.0 - p, p])

    def mode() -> list[Any]:
        with factory() as session:
            return rank_directly(session, get_benchmark(session, "big"), request)[0]

    def reference() -> Any:
        return find_label_issues(
            y,
            probs,
            filter_by="confident_learning",
            return_indices_ranked_by="self_confidence",
            n_jobs=1,
        )

    def read() -> Any:
        # What the mode reads before cleanlab runs: the labelled items and the scores.
        with factory() as session:
            labelled = load_labelled(session, "big", "defect")
            return detector_scores(session, get_detector(session, detector), labelled)

    # First as the first request after the ranker's scores were written reads (rows), then as
    # every request after the warm-up the import or the rank-errors job queues (kept arrays).
    cold, _, cold_outputs = run_rounds({"mode": mode, "cleanlab": reference, "read": read}, rounds)
    keep_columns(factory, "big")
    wall, _, outputs = run_rounds({"mode": mode, "cleanlab": reference, "read": read}, rounds)
    listed = [d.instance_id for d in outputs["mode"]]
    want = items.instance_ids[outputs["cleanlab"]].tolist()
    mode_s, ref_s = _median(wall["mode"]), _median(wall["cleanlab"])
    rows_s, rows_ref_s = _median(cold["mode"]), _median(cold["cleanlab"])
    return {
        "cleanlab_mode_s": mode_s,
        "cleanlab_find_label_issues_s": ref_s,
        "cleanlab_mode_vs_cleanlab": round(mode_s / ref_s, 2),
        "cleanlab_mode_read_s": _median(wall["read"]),
        "cleanlab_mode_from_rows_s": rows_s,
        "cleanlab_mode_from_rows_vs_cleanlab": round(rows_s / rows_ref_s, 2),
        "cleanlab_mode_from_rows_read_s": _median(cold["read"]),
        "cleanlab_same_list_from_rows": [d.instance_id for d in cold_outputs["mode"]] == want,
        "cleanlab_mode_peak_mib": round(_peak(mode), 1),
        "cleanlab_find_label_issues_peak_mib": round(_peak(reference), 1),
        "cleanlab_same_list": listed == want,
        "cleanlab_issues": len(want),
    }


def main() -> None:
    """Seed, measure, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--groups", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--databases", default="sqlite")
    parser.add_argument(
        "--skip", default="", help="rankers left out of the side-by-side timing (comma-separated)"
    )
    parser.add_argument(
        "--kernels-s", type=float, default=None, help="the job's kernels' time, if measured apart"
    )
    parser.add_argument("--no-job", action="store_true", help="leave the whole job out")
    args = parser.parse_args()
    args.skip = {n for n in args.skip.split(",") if n}
    result: dict[str, Any] = {
        "reference": "numpy kernels and cleanlab.filter.find_label_issues on the same arrays",
        "items": args.n,
        "models": args.models,
        "groups": args.groups,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "targets": TARGETS,
    }
    with tempfile.TemporaryDirectory(prefix="appellate-ranker-bench-") as tmp:
        work = Path(tmp)
        seed_csv(work / "items.csv", args.n, args.models, args.groups)
        for dialect in args.databases.split(","):
            result[dialect] = run_database(dialect, args, work)
            print(f"{dialect} done", file=sys.stderr)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
