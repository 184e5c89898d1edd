"""`appellate serve --with-worker`: the dashboard queues a job and the worker beside it runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from app.db import session_factory, transaction
from app.ingest.judgebench import import_judgebench
from app.services.evidence.language_models import register_language_model
from app.settings import Settings
from tests.conftest import DATA, REPO
from tests.support.auth_support import bearer
from tests.support.live_server import free_port, wait_for_http
from workers.engines.models import describe_model

PAIRS = sorted((DATA / "judgebench").glob("dataset=judgebench,*.jsonl"))[0]


def test_serve_with_worker_runs_queued_jobs_and_stops_both(
    settings: Settings, engine: Any, tiny_model_dir: Path
):
    info = describe_model(tiny_model_dir)
    with transaction(session_factory(engine)) as s:
        register_language_model(
            s, "tiny", path=str(tiny_model_dir), fingerprint=info.fingerprint, dtype="float32"
        )
        import_judgebench(s, PAIRS, benchmark="jb")
    headers = bearer(settings, "ops", "reviewer")
    port = free_port()
    env = {
        **os.environ,
        "APPELLATE_DATABASE_URL": settings.resolved_database_url,
        "APPELLATE_DATA_DIR": str(settings.data_dir),
    }
    command = ["serve", "--with-worker", "--device", "cpu", "--port", str(port)]
    server = subprocess.Popen([sys.executable, "-m", "app.cli", *command], env=env, cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        wait_for_http(f"{base}/healthz", deadline)
        children = psutil.Process(server.pid).children()
        assert len(children) == 1 and "worker" in children[0].cmdline()
        made = httpx.post(
            f"{base}/api/benchmarks/jb/judge",
            json={"model": "tiny", "mode": "forced", "limit": 3},
            headers=headers,
        )
        assert made.status_code == 201, made.text
        job_url = f"{base}/api/jobs/{made.json()['id']}"
        job = made.json()
        while job["status"] in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.3)
            job = httpx.get(job_url, headers=headers).json()
        assert job["status"] == "done", job
        assert job["result"]["judgments"] == 6 and job["progress_done"] == 6
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
    assert not children[0].is_running() or children[0].status() == psutil.STATUS_ZOMBIE
