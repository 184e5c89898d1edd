"""Import speed and memory: 1M generic rows through ``import_table`` vs a naive ORM import.

Prints one JSON document. Each import runs in its own subprocess (so its RSS high-water mark is
its own) into a fresh database: a temporary SQLite file, and a temporary PostgreSQL database on
127.0.0.1:5432 that is dropped afterwards. Usage::

    .venv/bin/python benchmarks/import_bench.py [--rows 1000000] [--naive-rows 20000]
        [--databases sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import subprocess
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

PG_ADMIN_URL = os.environ.get(
    "APPELLATE_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
COLUMNS = ["id", "group", "prompt", "response", "label", "score"]
TABLE_ARGS: dict[str, Any] = {
    "kind": "response",
    "mapping": {"prompt": "prompt", "response": "response"},
    "id_column": "id",
    "group": "group",
    "labels": {"truth": "label"},
    "scores": {"bench-probe": "score"},
}


def generate_csv(path: Path, rows: int) -> int:
    """Write ``rows`` synthetic rows (8 per group) and return the file size in bytes."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for i in range(rows):
            writer.writerow(
                [
                    f"item-{i:07d}",
                    f"question-{i // 8:06d}",
                    f"Is statement number {i} true? Answer briefly.",
                    f"I believe statement {i} is {'true' if i % 3 else 'false'}, for reasons.",
                    i % 2,
                    f"{(i * 7919 % 10007) / 10007:.6f}",
                ]
            )
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


def run_worker(mode: str, url: str, path: Path, workdir: Path) -> dict[str, Any]:
    """Run one import in a subprocess and return what it measured."""
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            mode,
            "--url",
            url,
            "--file",
            str(path),
            "--workdir",
            str(workdir),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _peak_rss_mib() -> float:
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if platform.system() == "Darwin" else 1024), 1)


def worker(mode: str, url: str, path: Path, workdir: Path) -> dict[str, Any]:
    """The measured import, inside the subprocess."""
    from app.db import make_engine, session_factory, transaction
    from app.settings import Settings

    engine = make_engine(Settings(data_dir=workdir, database_url=url))
    factory = session_factory(engine)
    rss_before = _peak_rss_mib()
    start = time.perf_counter()
    if mode in ("fast", "fast-again"):
        from app.ingest.table import import_table

        with transaction(factory) as session:
            summary = import_table(session, path, benchmark="bench", **TABLE_ARGS)
        rows = summary.instances_added + summary.instances_skipped
        added = summary.added
    else:
        rows = naive_import(factory, path, flush_every=1 if mode == "naive" else 1000)
        added = 3 * rows  # an instance, a label event and a score per row
    seconds = time.perf_counter() - start
    engine.dispose()
    return {
        "rows": rows,
        "rows_added": added,
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds, 1),
        "peak_rss_mib": _peak_rss_mib(),
        "rss_before_import_mib": rss_before,
    }


def naive_import(factory: Any, path: Path, flush_every: int) -> int:
    """The baseline: one Instance, LabelEvent and Score ORM object per row, added to a session.

    With ``flush_every=1`` each instance is flushed to learn its id (the naive way, since the
    tables have no ORM relationship to carry it); with a larger value instances are flushed in
    batches and their label and score objects added afterwards (the ORM's unit of work at best).
    """
    from app.db import transaction
    from app.tables import Benchmark, Detector, Instance, LabelEvent, Score

    n = 0
    with transaction(factory) as session, path.open(encoding="utf-8", newline="") as fh:
        bench = Benchmark(name="bench", kind="response")
        detector = Detector(name="bench-probe", kind="external")
        session.add_all([bench, detector])
        session.flush()
        pending: list[tuple[Instance, dict[str, str]]] = []

        def flush() -> None:
            session.flush()
            for inst, row in pending:
                session.add(
                    LabelEvent(
                        instance_id=inst.id, label_name="truth", value=row["label"], source="import"
                    )
                )
                session.add(
                    Score(detector_id=detector.id, instance_id=inst.id, score=float(row["score"]))
                )
            pending.clear()

        for row in csv.DictReader(fh):
            inst = Instance(
                benchmark_id=bench.id,
                external_id=row["id"],
                group_key=row["group"],
                payload={"prompt": row["prompt"], "response": row["response"]},
            )
            session.add(inst)
            pending.append((inst, row))
            n += 1
            if len(pending) >= flush_every:
                flush()
        flush()
    return n


def main() -> None:
    """Parse options, run the imports side by side, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--naive-rows", type=int, default=20_000)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.url, Path(args.file), Path(args.workdir))))
        return

    results: dict[str, Any] = {
        "rows": args.rows,
        "naive_rows": args.naive_rows,
        "columns": COLUMNS,
        "fast": "import_table: streamed CSV, chunks of 4000 rows, set-based existence checks, "
        "bulk INSERT (one instance, one label event, one score per row)",
        "naive": "one Instance + LabelEvent + Score ORM object per row, flush per row for the "
        "instance id, one commit",
        "orm_batched": "the same ORM objects, flushed every 1000 rows",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "databases": {},
    }
    with tempfile.TemporaryDirectory(prefix="appellate-bench-") as tmp:
        work = Path(tmp)
        big, sample = work / "rows.csv", work / "sample.csv"
        t0 = time.perf_counter()
        results["csv_bytes"] = generate_csv(big, args.rows)
        results["csv_generation_s"] = round(time.perf_counter() - t0, 1)
        head_csv(big, sample, min(args.naive_rows, args.rows))
        for dialect in [d.strip() for d in args.databases.split(",") if d.strip()]:
            entry: dict[str, Any] = {}
            with fresh_database(dialect, work) as url:
                entry["fast"] = run_worker("fast", url, big, work)
                entry["fast_reimport_unchanged"] = run_worker("fast-again", url, big, work)
            with fresh_database(dialect, work) as url:
                entry["fast_on_sample"] = run_worker("fast", url, sample, work)
            with fresh_database(dialect, work) as url:
                entry["naive_on_sample"] = run_worker("naive", url, sample, work)
            with fresh_database(dialect, work) as url:
                entry["orm_batched_on_sample"] = run_worker("orm-batched", url, sample, work)
            naive = entry["naive_on_sample"]["rows_per_s"]
            entry["speedup_vs_naive"] = round(entry["fast"]["rows_per_s"] / naive, 1)
            entry["speedup_vs_naive_same_sample"] = round(
                entry["fast_on_sample"]["rows_per_s"] / naive, 1
            )
            entry["speedup_vs_orm_batched"] = round(
                entry["fast"]["rows_per_s"] / entry["orm_batched_on_sample"]["rows_per_s"], 1
            )
            entry["peak_rss_under_1_gib"] = entry["fast"]["peak_rss_mib"] < 1024
            results["databases"][dialect] = entry
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
