"""Import speed and memory: a large file through ``import_table`` vs a naive ORM import.

Prints one JSON document. Two kinds of rows: ``response`` (an instance, a label and a score per
row) and ``choice`` (a question with four options, a reference letter and ``--models`` model
answers per row, as MMLU-Redux-style audits import them). Measured per database:

- ``fast``: the whole file (default 1M rows) once: rows/s and the peak RSS of its process;
- ``fast_reimport_unchanged``: the same file again (everything skipped);
- ``same_sample``: the first ``--sample-rows`` rows imported by ``import_table`` and by the
  naive ORM import, alternately for ``--rounds`` rounds, each into a fresh database; the
  speedup is the ratio of their median times on the same rows (like with like), and the same
  ratio of client CPU and of client plus database server CPU.

Reference: the naive ORM import (``naive_import``) of the same sample rows, measured the same
way in the same run.

Each import runs in its own subprocess (its RSS high-water mark is its own). Its CPU is counted
twice over: ``client_cpu_s``, the subprocess's own (``time.process_time`` around the import;
SQLite's work runs in it), and on PostgreSQL ``database_cpu_s``, the CPU of the database's
server backends from the subprocess's start to the end of its import, read from ``/proc``
through their ``pg_stat_activity`` pids (``db_cpu.py``; ``null`` on SQLite);
``total_cpu_s`` is their sum. Usage::

    .venv/bin/python benchmarks/import_bench.py [--kind choice --models 20] [--rows 1000000]
        [--sample-rows 20000] [--rounds 3] [--databases sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402

from benchmarks.db_cpu import POSTGRES_BASIS, SQLITE_BASIS, hand_back, run_metered  # noqa: E402

PG_ADMIN_URL = os.environ.get(
    "APPELLATE_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
LETTERS = "ABCD"


def model_columns(n_models: int) -> list[str]:
    """Names of the model-answer columns of a choice file."""
    return [f"model_{j:02d}" for j in range(n_models)]


def columns(kind: str, n_models: int) -> list[str]:
    """The CSV header of a generated file."""
    if kind == "response":
        return ["id", "group", "prompt", "response", "label", "score"]
    return ["id", "group", "question", "a", "b", "c", "d", "gold", *model_columns(n_models)]


def table_args(kind: str, n_models: int) -> dict[str, Any]:
    """The ``import_table`` arguments of a generated file."""
    if kind == "response":
        return {
            "kind": "response",
            "mapping": {"prompt": "prompt", "response": "response"},
            "labels": {"truth": "label"},
            "scores": {"bench-probe": "score"},
        }
    return {
        "kind": "choice",
        "mapping": {"question": "question"},
        "option_columns": dict(zip(LETTERS, "abcd", strict=True)),
        "labels": {"reference": "gold"},
        "answers": {m: m for m in model_columns(n_models)},
    }


def row(kind: str, i: int, n_models: int) -> list[Any]:
    """Synthetic row ``i`` (8 rows per group)."""
    if kind == "response":
        return [
            f"item-{i:07d}",
            f"question-{i // 8:06d}",
            f"Is statement number {i} true? Answer briefly.",
            f"I believe statement {i} is {'true' if i % 3 else 'false'}, for reasons.",
            i % 2,
            f"{(i * 7919 % 10007) / 10007:.6f}",
        ]
    gold = LETTERS[i % 4]
    # Most models agree with the label; a few pick another letter, as in real audits.
    answers = [gold if (i * 31 + j * 17) % 7 else LETTERS[(i + j) % 4] for j in range(n_models)]
    options = [f"option {c} of question {i}" for c in "abcd"]
    return [
        f"item-{i:07d}",
        f"subject-{i // 8:06d}",
        f"Which is right, question {i}?",
        *options,
        gold,
        *answers,
    ]


def generate_csv(path: Path, kind: str, rows: int, n_models: int) -> int:
    """Write ``rows`` synthetic rows and return the file size in bytes."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns(kind, n_models))
        for i in range(rows):
            writer.writerow(row(kind, i, n_models))
    return path.stat().st_size


def head_csv(source: Path, target: Path, rows: int) -> None:
    """The header and the first ``rows`` rows of ``source``."""
    with source.open(encoding="utf-8") as src, target.open("w", encoding="utf-8") as dst:
        for n, line in enumerate(src):
            if n > rows:
                break
            dst.write(line)


@contextmanager
def fresh_database(dialect: str, workdir: Path) -> Iterator[str]:
    """A migrated, empty database of ``dialect``; a PostgreSQL one is dropped afterwards."""
    from app import migrate
    from app.db import make_engine
    from app.settings import Settings

    if dialect == "sqlite":
        url = f"sqlite:///{workdir / f'bench-{uuid.uuid4().hex[:8]}.sqlite3'}"
        admin = None
    else:
        name = f"appellate_bench_{uuid.uuid4().hex[:10]}"
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        engine = make_engine(Settings(data_dir=workdir, database_url=url))
        migrate.upgrade(engine)
        engine.dispose()
        yield url
    finally:
        if admin is not None:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()
        elif url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)


def run_worker(
    mode: str, url: str, path: Path, workdir: Path, kind: str, n_models: int
) -> dict[str, Any]:
    """Run one import in a subprocess; what it measured and the database server's CPU.

    ``database_cpu_s``: the PostgreSQL backends' CPU from the subprocess's start to the end of
    its import (``db_cpu.run_metered``); ``None`` on SQLite, which runs in the subprocess.
    """
    cmd = [
        sys.executable, __file__, "--worker", mode, "--url", url, "--file", str(path),
        "--workdir", str(workdir), "--kind", kind, "--models", str(n_models),
    ]  # fmt: skip
    measured, database_s = run_metered(cmd, url, cwd=ROOT, env=os.environ)
    total = measured["client_cpu_s"] + (database_s or 0.0)
    return {
        **measured,
        "database_cpu_s": None if database_s is None else round(database_s, 3),
        "total_cpu_s": round(total, 3),
    }


def _peak_rss_mib() -> float:
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if platform.system() == "Darwin" else 1024), 1)


def worker(mode: str, url: str, path: Path, workdir: Path, kind: str, n_models: int) -> None:
    """The measured import, inside the subprocess; handed back before its connection closes."""
    from app.db import make_engine, session_factory, transaction
    from app.ingest.table import import_table
    from app.settings import Settings

    # Both modes' modules (the importer's and the ORM tables) are loaded before the clock
    # starts: loading code is no part of either import's work.
    engine = make_engine(Settings(data_dir=workdir, database_url=url))
    factory = session_factory(engine)
    rss_before = _peak_rss_mib()
    start, cpu = time.perf_counter(), time.process_time()
    if mode == "fast":
        with transaction(factory) as session:
            summary = import_table(
                session, path, benchmark="bench", id_column="id", group="group",
                **table_args(kind, n_models),
            )  # fmt: skip
        rows = summary.instances_added + summary.instances_skipped
        added = summary.added
    else:
        rows, added = naive_import(factory, path, kind, n_models)
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu
    hand_back({
        "rows": rows,
        "rows_added": added,
        "seconds": round(seconds, 3),
        # This process only: SQLite works in it, a PostgreSQL server does not.
        "client_cpu_s": round(cpu, 3),
        "rows_per_s": round(rows / seconds, 1),
        "peak_rss_mib": _peak_rss_mib(),
        "rss_before_import_mib": rss_before,
    })  # fmt: skip
    # The backends stay up until the parent has read their CPU (hand_back returns then).
    engine.dispose()


def naive_import(factory: Any, path: Path, kind: str, n_models: int) -> tuple[int, int]:
    """The baseline: ORM objects per row added to one session, each instance flushed for its id.

    Response rows get an Instance, a LabelEvent and a Score; choice rows an Instance, a
    LabelEvent and one Prediction per model answer. Returns (rows, database rows added).
    """
    from app.db import transaction
    from app.tables import Benchmark, Detector, Instance, LabelEvent, Prediction, Score

    n = added = 0
    with transaction(factory) as session, path.open(encoding="utf-8", newline="") as fh:
        bench = Benchmark(name="bench", kind=kind)
        names = ["bench-probe"] if kind == "response" else model_columns(n_models)
        detectors = [
            Detector(name=name, kind="external" if kind == "response" else "model")
            for name in names
        ]
        session.add_all([bench, *detectors])
        session.flush()
        for r in csv.DictReader(fh):
            if kind == "response":
                payload: dict[str, Any] = {"prompt": r["prompt"], "response": r["response"]}
            else:
                payload = {"question": r["question"], "options": [r[c] for c in "abcd"]}
            inst = Instance(
                benchmark_id=bench.id, external_id=r["id"], group_key=r["group"], payload=payload
            )
            session.add(inst)
            session.flush()  # the naive way to learn the id: the tables have no relationship
            label = ("truth", r["label"]) if kind == "response" else ("reference", r["gold"])
            session.add(
                LabelEvent(
                    instance_id=inst.id, label_name=label[0], value=label[1], source="import"
                )
            )
            if kind == "response":
                session.add(
                    Score(detector_id=detectors[0].id, instance_id=inst.id, score=float(r["score"]))
                )
                added += 3
            else:
                for d in detectors:
                    session.add(Prediction(detector_id=d.id, instance_id=inst.id, answer=r[d.name]))
                added += 2 + len(detectors)
            n += 1
    return n, added


def same_sample(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Both imports' runs on the same rows: per-run figures, medians and naive / fast ratios.

    Wall time, client CPU and client plus database server CPU (PostgreSQL; on SQLite the
    database's CPU is the client's and ``database_cpu_s`` is ``null``).
    """

    def median(mode: str, key: str) -> float | None:
        values = [r[key] for r in runs[mode]]
        return None if None in values else round(statistics.median(values), 3)

    out: dict[str, Any] = {}
    for key, name in (
        ("seconds", "seconds"), ("client_cpu_s", "client_cpu"),
        ("database_cpu_s", "database_cpu"), ("total_cpu_s", "total_cpu"),
    ):  # fmt: skip
        out[name] = {mode: [r[key] for r in done] for mode, done in runs.items()}
        medians = {mode: median(mode, key) for mode in runs}
        out[f"{name}_median"] = medians
        fast, naive = medians["fast"], medians["naive"]
        ratio = None if not fast or naive is None else round(naive / fast, 1)
        out[f"{name}_speedup_vs_naive"] = ratio
    # The headline, as before: wall time.
    out["speedup_vs_naive"] = out.pop("seconds_speedup_vs_naive")
    return out


def main() -> None:
    """Parse options, run the imports, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", choices=("response", "choice"), default="response")
    parser.add_argument("--models", type=int, default=20, help="model columns (choice)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--sample-rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.url, Path(args.file), Path(args.workdir), args.kind, args.models)
        return

    results: dict[str, Any] = {
        "kind": args.kind,
        "rows": args.rows,
        "models": args.models if args.kind == "choice" else None,
        "sample_rows": min(args.sample_rows, args.rows),
        "rounds": args.rounds,
        "fast": "import_table: streamed CSV, chunks of 4000 rows, set-based existence checks, "
        "bulk INSERT",
        "naive": "ORM objects per row in one session, each instance flushed for its id, one commit",
        "reference": "naive: the same sample rows, alternating rounds, each into a fresh database",
        "database_cpu_basis": {"postgresql": POSTGRES_BASIS, "sqlite": SQLITE_BASIS},
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "databases": {},
    }
    with tempfile.TemporaryDirectory(prefix="appellate-bench-") as tmp:
        work = Path(tmp)
        big, sample = work / "rows.csv", work / "sample.csv"
        t0 = time.perf_counter()
        results["csv_bytes"] = generate_csv(big, args.kind, args.rows, args.models)
        results["csv_generation_s"] = round(time.perf_counter() - t0, 1)
        head_csv(big, sample, results["sample_rows"])

        def run(mode: str, path: Path, url: str) -> dict[str, Any]:
            return run_worker(mode, url, path, work, args.kind, args.models)

        for dialect in [d.strip() for d in args.databases.split(",") if d.strip()]:
            entry: dict[str, Any] = {}
            with fresh_database(dialect, work) as url:
                entry["fast"] = run("fast", big, url)
                entry["fast_reimport_unchanged"] = run("fast", big, url)
            runs: dict[str, list[dict[str, Any]]] = {"fast": [], "naive": []}
            for r in range(args.rounds):
                # Alternate which goes first, so neither always follows the other.
                for mode in ("fast", "naive") if r % 2 == 0 else ("naive", "fast"):
                    with fresh_database(dialect, work) as url:
                        runs[mode].append(run(mode, sample, url))
            entry["same_sample"] = same_sample(runs)
            entry["peak_rss_mib"] = entry["fast"]["peak_rss_mib"]
            results["databases"][dialect] = entry
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
