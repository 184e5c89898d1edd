"""The worker fleet under faults, and the two guards it relies on.

- ``benchmarks/fleet.py`` at a small size on PostgreSQL: three ``appellate worker`` processes
  on one judge job (tiny model, 8 pairs, both orders, AB activations), the lease holder
  SIGKILLed three times and the workers' connections cut once: the job is done with each
  (pair, order) judged once, flip labels equal to a recomputation and one activation row per
  AB judgment, no stray file.
- A batch's transaction holds the job's row: a worker whose lease ran out cannot be requeued
  and claimed by another while it writes (PostgreSQL; SQLite serialises writers anyway).
- Shard writers of one activation folder take turns: a second writer of the same instances
  waits, then stores nothing twice; a killed writer's partial file is removed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from app.db import transaction
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.tables import Job, utcnow
from tests.conftest import DIALECTS, REPO
from tests.support.job_support import store_on
from workers.engines.activations import ShardFiles
from workers.runner import JobContext, JobStopped

needs_postgresql = pytest.mark.skipif(
    "postgresql" not in DIALECTS, reason="APPELLATE_TEST_DATABASES excludes postgresql"
)


@needs_postgresql
@pytest.mark.slow
def test_fleet_with_killed_workers_judges_each_unit_once(tiny_model_dir: Path) -> None:
    pairs, kills = 8, 3
    args = ["--pairs", str(pairs), "--workers", "3", "--kills", str(kills), "--cuts", "1"]
    args += ["--victim", "holder", "--gap", "0.2", "1.0", "--lease-seconds", "4"]
    args += ["--batch-size", "1", "--model-dir", str(tiny_model_dir), "--timeout", "300"]
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "fleet.py"), *args],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["checks"] == {k: True for k in report["checks"]}, (report, done.stderr[-4000:])
    assert report["kills"] == report["kills_of_lease_holder"] == kills
    assert report["cuts"] == 1
    assert report["job"]["status"] == "done" and report["job"]["lease_losses"] >= kills
    assert report["judgments"] == report["distinct_units"] == 2 * pairs
    assert report["duplicate_judgments"] == report["duplicate_activation_rows"] == 0
    assert report["activation_rows"] == pairs and report["stray_files"] == []
    assert report["flip_labels"] == pairs and report["flip_mismatches"] == 0


def _claimed(factory: Any, lease_seconds: float = 60) -> job_queue.Claim:
    with transaction(factory) as s:
        job_queue.enqueue(s, "noop", {})
    with transaction(factory) as s:
        claim = job_queue.claim(s, "first", lease_seconds=lease_seconds)
    assert claim is not None
    return claim


@needs_postgresql
def test_a_batch_holds_its_job_so_no_other_worker_claims_it_meanwhile(
    settings: Settings, engine: Engine
) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("row locks: SQLite's writers are serialised by its write lock")
    store = store_on(settings, engine)
    claim = _claimed(store.factory)
    ctx = JobContext(store, claim, "cpu", threading.Event())
    writing, release = threading.Event(), threading.Event()

    # The lease has run out (a stalled worker) but nobody has requeued the job yet.
    with transaction(store.factory) as s:
        s.execute(
            update(Job)
            .where(Job.id == claim.job_id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    written: list[str] = []
    taken: list[job_queue.Claim | None] = []

    def batch(session: Session) -> str:
        writing.set()
        release.wait(30)
        return "written"

    def stalled_worker() -> None:
        written.append(ctx.commit(batch))

    def other_worker() -> None:
        writing.wait(30)
        with transaction(store.write_factory) as s:
            taken.append(job_queue.claim(s, "second", lease_seconds=60))

    first = threading.Thread(target=stalled_worker)
    first.start()
    thief = threading.Thread(target=other_worker)
    thief.start()
    assert writing.wait(30)
    thief.join(timeout=1.5)
    assert thief.is_alive()  # the requeue of the stale lease waits for the batch's commit
    release.set()
    first.join(timeout=30)
    thief.join(timeout=30)
    assert written == ["written"]  # the batch committed while the job was still its worker's
    (second,) = taken
    assert second is not None and second.owner == "second" and second.lease_losses == 1
    with pytest.raises(JobStopped):  # and its next batch finds the job taken over
        ctx.commit(lambda s: None)


def test_shard_writers_take_turns_and_store_each_instance_once(tmp_path: Path) -> None:
    def files() -> ShardFiles:
        return ShardFiles(tmp_path / "set", n_layers=2, d_model=3, dtype="float32")

    first, second = files(), files()
    (tmp_path / "set").mkdir()
    partial = tmp_path / "set" / ".shard-killed.tmp"
    partial.write_bytes(b"half a shard")  # left by a writer killed mid-write
    values = np.ones((3, 2, 3), dtype=np.float32)
    result: list[list[int]] = []
    with first._writing():
        late = threading.Thread(target=lambda: result.append(second.append([1, 2, 3], values)))
        late.start()
        late.join(timeout=0.5)
        assert late.is_alive()  # waits for the folder's lock
        first._write_shard(np.asarray([2, 3], dtype=np.int64), values[:2])
    late.join(timeout=30)
    assert not partial.exists()  # the second writer found it under the lock
    assert result == [[1]]  # only the instance the first writer did not store
    assert sorted(first.done_ids()) == [1, 2, 3]
    assert [p.name for p in sorted((tmp_path / "set").iterdir())] == [
        "shard-000000.safetensors",
        "shard-000001.safetensors",
    ]
    (tmp_path / "set" / ".shard-x.tmp").write_bytes(b"")
    assert first.tidy() == 1 and len(list((tmp_path / "set").iterdir())) == 2
