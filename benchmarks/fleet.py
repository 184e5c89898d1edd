"""Worker fleet under faults: a judge job finished by workers that keep being SIGKILLed.

A fresh PostgreSQL database gets a slice of the bundled JudgeBench pairs and a registered local
model (the bundled SmolLM2, converted once into the default data directory, or ``--model-dir``);
one judge job is queued (forced mode, both orders, AB activations captured, ``--pairs`` pairs),
``--workers`` ``appellate worker`` processes run it, and every ``--gap`` seconds (uniformly
drawn) one of them is SIGKILLed and started again, ``--kills`` times in all; ``--cuts`` times
the workers' database connections are cut instead (``pg_terminate_backend``), which the workers
must survive without a restart. Then the store is audited:

- the job is done; - every (pair, order) unit has exactly one judgment (rows = distinct units =
  pairs x 2); - the flip labels equal :func:`app.services.evidence.flips.flip_value` recomputed from
  the judgments;
- the activation set's folder holds only complete shards, with exactly one row per AB judgment
  (no instance twice, none missing, none without a judgment), in the order the set's row records.

Prints one JSON object (counts, seconds, ``ok``) and exits 1 when a check fails.

    python benchmarks/fleet.py                       # 60 pairs, 3 workers, 20 kills, SmolLM2
    python benchmarks/fleet.py --pairs 12 --kills 5 --victim holder --model-dir TINY
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, func, select, text  # noqa: E402

from app.db import transaction  # noqa: E402
from app.ingest.judgebench import import_judgebench  # noqa: E402
from app.services.evidence.activation_sets import get_activation_set  # noqa: E402
from app.services.evidence.flips import flip_label_name, flip_value  # noqa: E402
from app.services.evidence.labels import latest_label_values  # noqa: E402
from app.services.evidence.language_models import register_language_model  # noqa: E402
from app.services.jobs import queue as job_queue  # noqa: E402
from app.services.jobs.judge import JudgeParams  # noqa: E402
from app.services.jobs.kind import enqueue  # noqa: E402
from app.settings import BUNDLED_DATA, Settings  # noqa: E402
from app.store import Store  # noqa: E402
from app.tables import Detector, Judgment, Order  # noqa: E402
from benchmarks.serving import fresh_store  # noqa: E402
from workers.engines.activations import shard_files  # noqa: E402
from workers.engines.models import convert_smollm2, describe_model  # noqa: E402
from workers.jobs.judge import activation_set_name  # noqa: E402

BENCHMARK = "judgebench"
MODEL = "fleet-judge"
# The workers' connections are named so that a cut reaches them and not the auditor's.
WORKER_APP_NAME = "appellate-fleet-worker"
PAIRS = sorted((BUNDLED_DATA / "judgebench").glob("dataset=judgebench,*.jsonl"))


@dataclass
class Fleet:
    """The worker processes, restarted in place when killed; their logs go to ``log_dir``."""

    env: dict[str, str]
    lease_seconds: float
    log_dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    started: int = 0
    _logs: list[IO[bytes]] = field(default_factory=list)

    def start(self, slot: int | None = None) -> None:
        """Start a worker in ``slot`` (a new slot when None)."""
        log = open(self.log_dir / f"worker-{self.started}.log", "wb")  # noqa: SIM115
        self._logs.append(log)
        cmd = [sys.executable, "-m", "app.cli", "worker", "--device", "cpu", "--kinds", "judge"]
        cmd += ["--lease-seconds", str(self.lease_seconds), "--poll-seconds", "0.2"]
        proc = subprocess.Popen(cmd, env=self.env, cwd=ROOT, stdout=log, stderr=log)
        self.started += 1
        if slot is None:
            self.procs.append(proc)
        else:
            self.procs[slot] = proc

    def kill(self, slot: int) -> None:
        """SIGKILL the worker in ``slot`` and start another there."""
        self.procs[slot].send_signal(signal.SIGKILL)
        self.procs[slot].wait()
        self.start(slot)

    def stop(self) -> list[int | None]:
        """SIGTERM every worker; their exit codes (None for one that did not stop in 60 s)."""
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=60))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes.append(None)
        for log in self._logs:
            log.close()
        return codes


def holder_pid(owner: str | None) -> int | None:
    """The pid in a lease owner name (``host:pid:random``), if any."""
    parts = (owner or "").split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


def cut_connections(admin_url: str, database: str) -> int:
    """Terminate every backend of the fleet's workers on ``database``; how many were cut."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            return len(
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :db AND application_name = :app"
                    ),
                    {"db": database, "app": WORKER_APP_NAME},
                ).all()
            )
    finally:
        admin.dispose()


def setup(store: Store, model_dir: Path, args: argparse.Namespace) -> tuple[int, JudgeParams]:
    """Import the pairs, register the model, queue the judge job; its id and parameters."""
    info = describe_model(model_dir)
    params = JudgeParams(
        benchmark=BENCHMARK,
        model=MODEL,
        mode="forced",
        max_new_tokens=args.max_new_tokens,
        limit=args.pairs,
        seed=args.seed,
        batch_size=args.batch_size,
    )
    with transaction(store.factory) as s:
        import_judgebench(s, PAIRS[0], benchmark=BENCHMARK)
        register_language_model(
            s, MODEL, path=str(model_dir), fingerprint=info.fingerprint, dtype="float32"
        )
        job_id = enqueue(s, params).id
    return job_id, params


def audit(store: Store, job_id: int, params: JudgeParams) -> dict[str, Any]:
    """The job's outcome and the consistency of its judgments, flip labels and activations."""
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
        detector_id = s.scalar(select(Detector.id).where(Detector.name == params.judge))
        rows = s.execute(
            select(Judgment.instance_id, Judgment.order, Judgment.choice, Judgment.activation_ref)
            .where(Judgment.detector_id == detector_id)
            .order_by(Judgment.id)
        ).all()
        distinct = s.scalar(
            select(func.count()).select_from(
                select(Judgment.instance_id, Judgment.order)
                .where(Judgment.detector_id == detector_id)
                .distinct()
                .subquery()
            )
        )
        choices: dict[int, dict[str, str]] = {}
        for iid, order, choice, _ in rows:
            choices.setdefault(iid, {})[order] = choice
        labels = latest_label_values(s, flip_label_name(params.judge), list(choices))
        aset = get_activation_set(s, activation_set_name(params))
        files = shard_files(store.settings.data_dir, aset)
        recorded = [int(x) for x in aset.instance_ids]
    expected = {
        iid: flip_value(c.get(Order.AB.value), c.get(Order.BA.value)) for iid, c in choices.items()
    }
    flip_mismatches = sum(labels.get(iid) != want for iid, want in expected.items())
    ab = [iid for iid, order, _, _ in rows if order == Order.AB.value]
    with_ref = {iid for iid, order, _, ref in rows if order == Order.AB.value and ref == aset.name}
    stored = files.done_ids()
    shards = files.shards()
    stray = sorted(p.name for p in files.folder.iterdir() if p not in set(shards))
    checks = {
        "job_done": job.status == "done",
        "units_once": len(rows) == distinct == 2 * params.limit if params.limit else False,
        "flips_match": flip_mismatches == 0 and len(labels) == len(choices),
        "activations_once": len(stored) == len(set(stored)) == len(ab),
        "activations_match_judgments": set(stored) == set(ab) == with_ref,
        "set_row_matches_files": recorded == stored,
        "no_stray_files": not stray,
    }
    return {
        "job": {
            "status": job.status,
            "attempts": job.attempts,
            "lease_losses": job.lease_losses,
            "error": job.error,
            "result_judgments": (job.result or {}).get("judgments"),
        },
        "judgments": len(rows),
        "distinct_units": distinct,
        "duplicate_judgments": len(rows) - (distinct or 0),
        "flip_labels": sum(v is not None for v in labels.values()),
        "flip_mismatches": flip_mismatches,
        "activation_rows": len(stored),
        "duplicate_activation_rows": len(stored) - len(set(stored)),
        "activation_shards": len(shards),
        "stray_files": stray,
        "checks": checks,
        "ok": all(checks.values()),
    }


def drive(
    fleet: Fleet, store: Store, job_id: int, args: argparse.Namespace, db: str
) -> dict[str, Any]:
    """Kill and cut until the job finishes (kills and cuts spread over the run); the counts."""
    rng = random.Random(args.seed)
    faults = ["kill"] * args.kills + ["cut"] * args.cuts
    rng.shuffle(faults)
    kills = holder_kills = cuts = cut_backends = 0
    last_progress = -1
    deadline = time.monotonic() + args.timeout
    next_at = time.monotonic() + rng.uniform(*args.gap)
    while time.monotonic() < deadline:
        with transaction(store.factory) as s:
            job = job_queue.get_job(s, job_id)
            status, owner, progress = job.status, job.lease_owner, job.progress_done
        if status in job_queue.FINISHED:
            break
        holder = holder_pid(owner) if status == "running" else None
        slots = {p.pid: k for k, p in enumerate(fleet.procs)}
        due = faults and time.monotonic() >= next_at
        # --victim holder: kill the lease holder once it has written a batch since the last kill.
        if due and faults[0] == "kill" and args.victim == "holder":
            due = holder in slots and progress > last_progress
        if due:
            fault = faults.pop(0)
            if fault == "kill":
                slot = slots[holder] if args.victim == "holder" else rng.randrange(len(fleet.procs))
                holder_kills += fleet.procs[slot].pid == holder
                fleet.kill(slot)
                kills += 1
                last_progress = progress
            else:
                cut_backends += cut_connections(args.admin_url, db)
                cuts += 1
            next_at = time.monotonic() + rng.uniform(*args.gap)
        time.sleep(0.05)
    return {
        "kills": kills,
        "kills_of_lease_holder": holder_kills,
        "cuts": cuts,
        "cut_backends": cut_backends,
        "workers_started": fleet.started,
    }


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Set up, run the fleet under faults, audit; the JSON report."""
    model_dir = args.model_dir or convert_smollm2(Settings().data_dir)
    data_dir = work / "data"
    with fresh_store("postgresql", data_dir) as settings:
        store = Store.open(settings)
        try:
            job_id, params = setup(store, Path(model_dir).resolve(), args)
            env = {
                **os.environ,
                "APPELLATE_DATABASE_URL": str(settings.database_url),
                "APPELLATE_DATA_DIR": str(data_dir),
                "APPELLATE_WORKER_THREADS": str(args.threads),
                "PGAPPNAME": WORKER_APP_NAME,
                "HF_HUB_OFFLINE": "1",
            }
            log_dir = args.log_dir or work
            log_dir.mkdir(parents=True, exist_ok=True)
            fleet = Fleet(env, args.lease_seconds, log_dir)
            t0 = time.perf_counter()
            for _ in range(args.workers):
                fleet.start()
            try:
                db = str(settings.database_url).rsplit("/", 1)[1]
                faults = drive(fleet, store, job_id, args, db)
            finally:
                exit_codes = fleet.stop()
            seconds = time.perf_counter() - t0
            report = audit(store, job_id, params)
        finally:
            store.close()
    return {
        "database": "postgresql",
        "model": Path(model_dir).name,
        "pairs": args.pairs,
        "units": 2 * args.pairs,
        "workers": args.workers,
        "batch_size": args.batch_size,
        "lease_seconds": args.lease_seconds,
        "victim": args.victim,
        **faults,
        "worker_exit_codes": exit_codes,
        "seconds": round(seconds, 1),
        **report,
    }


def main() -> None:
    """Parse arguments, run, print the JSON report; exit 1 when a check failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument(
        "--cuts", type=int, default=3, help="times the workers' connections are cut"
    )
    parser.add_argument("--victim", choices=("random", "holder"), default="random")
    parser.add_argument("--gap", type=float, nargs=2, default=(1.0, 6.0), metavar=("MIN", "MAX"))
    parser.add_argument("--lease-seconds", type=float, default=4.0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--log-dir", type=Path, default=None, help="keep the workers' logs here")
    parser.add_argument(
        "--admin-url",
        default=os.environ.get(
            "APPELLATE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ),
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="appellate-fleet-") as tmp:
        report = run(args, Path(tmp))
        if not report["ok"]:
            for log in sorted(Path(tmp).glob("worker-*.log")):
                sys.stderr.write(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}\n")
    print(json.dumps(report, indent=2))
    sys.exit(0 if report["ok"] else 1)


if __name__ == "__main__":
    main()
