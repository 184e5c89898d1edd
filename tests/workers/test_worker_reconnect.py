"""A worker cut off from PostgreSQL (its backends terminated) recovers without a restart.

An outage: the database refuses new connections for a while and every connection of one
``appellate worker`` process is terminated (``pg_terminate_backend``), so its next query and
its reconnections fail until the outage ends. Once while it waits for work and twice while it
runs a judge job on the tiny model: the same process (still running, one attempt, no lost
lease) finishes the job, every unit judged once. PostgreSQL only (SQLite has no server to lose).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, func, select, text

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.services.jobs import queue as job_queue
from app.services.jobs.judge import JudgeParams
from app.services.jobs.kind import enqueue
from app.settings import Settings
from app.store import Store
from app.tables import Judgment
from tests.conftest import DATA, PG_ADMIN_URL, REPO
from tests.support.job_support import register_tiny, store_on

pytestmark = pytest.mark.slow

PAIRS = sorted((DATA / "judgebench").glob("dataset=judgebench,*.jsonl"))[0]
APP_NAME = "appellate-reconnect-test"
# Long enough that a worker retrying through a cut never loses its lease on a loaded machine.
LEASE_SECONDS = 20


@pytest.fixture
def store(settings: Settings, engine: Engine, tiny_model_dir: Path) -> Store:
    if engine.dialect.name != "postgresql":
        pytest.skip("terminates PostgreSQL backends")
    store = store_on(settings, engine)
    register_tiny(store, tiny_model_dir)
    with transaction(store.factory) as s:
        import_judgebench(s, PAIRS, benchmark="jb")
    return store


def _outage(engine: Engine, seconds: float = 2.0) -> int:
    """Refuse connections, terminate the worker's backends (named by PGAPPNAME), wait, reopen.

    Run from the admin database (a database cannot refuse connections from inside itself).
    Returns how many backends were cut (0: the worker had none yet, nothing was done).
    """
    name = engine.url.database
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            pids = conn.scalars(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = :app "
                    "AND datname = :db"
                ),
                {"app": APP_NAME, "db": name},
            ).all()
            if not pids:
                return 0
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
            try:
                for pid in pids:
                    conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
                time.sleep(seconds)
            finally:
                conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
    finally:
        admin.dispose()
    return len(pids)


# A bound on liveness, not a timing: the worker loads the model and judges on a machine the
# rest of the suite (or CI's neighbours) may load several times over (120 s timed out once).
def _wait(what: Any, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_worker_survives_its_connections_being_cut(store: Store, engine: Engine, tmp_path: Path):
    env = {
        **os.environ,
        "APPELLATE_DATABASE_URL": store.settings.resolved_database_url,
        "APPELLATE_DATA_DIR": str(store.settings.data_dir),
        "APPELLATE_WORKER_THREADS": "1",
        "PGAPPNAME": APP_NAME,
        "HF_HUB_OFFLINE": "1",
    }
    cmd = [sys.executable, "-m", "app.cli", "worker", "--device", "cpu", "--kinds", "judge"]
    cmd += ["--lease-seconds", str(LEASE_SECONDS), "--poll-seconds", "0.2"]
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=out, stderr=out)
    try:
        # Idle: once started (the store opened: a cut during start-up is retried there), the
        # claim loop's connection is cut and its claims fail for the outage.
        _wait(lambda: "worker: kinds" in log.read_text())
        _wait(lambda: _outage(engine) > 0)
        assert worker.poll() is None, log.read_text()
        params = JudgeParams("jb", "tiny", mode="forced", limit=12, batch_size=1)
        with transaction(store.factory) as s:
            job_id = enqueue(s, params).id

        def job() -> Any:
            with transaction(store.factory) as s:
                return job_queue.get_job(s, job_id)

        cuts = 0
        for at in (2, 12):  # mid-job, twice
            _wait(lambda at=at: job().progress_done >= at or job().status in job_queue.FINISHED)
            if job().status in job_queue.FINISHED:
                break
            cuts += _outage(engine) > 0
        _wait(lambda: job().status in job_queue.FINISHED)
        assert worker.poll() is None, log.read_text()  # the same process, still running
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    text_log = log.read_text()
    finished = job()
    assert finished.status == "done", (finished.error, text_log)
    assert cuts == 2, text_log  # the job was cut off mid-way, twice
    assert "worker: database error, claiming again" in text_log  # the idle outage
    assert f"job {job_id}: database error, retrying" in text_log  # the outages mid-job
    # One claim by this process saw the job through: no lost lease, no second attempt.
    assert (finished.attempts, finished.lease_losses) == (1, 0), text_log
    assert code == 0, text_log
    with transaction(store.factory) as s:
        rows = s.scalar(select(func.count()).select_from(Judgment))
        distinct = s.scalar(
            select(func.count()).select_from(
                select(Judgment.instance_id, Judgment.order).distinct().subquery()
            )
        )
    assert rows == distinct == 24
