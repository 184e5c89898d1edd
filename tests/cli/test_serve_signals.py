"""SIGTERM or Ctrl-C on ``appellate serve --with-worker``: the worker stops before the server."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO
from tests.support.live_server import free_port, wait_for_http

pytestmark = pytest.mark.slow

WORKER_READY = "worker: kinds"  # the worker's first line, printed once its signal handlers are set


def _lines(stream: object) -> queue.Queue[str]:
    """The stream's lines, read by a thread (so that the test can wait with a deadline)."""
    out: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:  # type: ignore[attr-defined]
            out.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return out


def _wait_for_line(lines: queue.Queue[str], needle: str, deadline: float, seen: list[str]) -> None:
    while not any(needle in line for line in seen):
        assert time.monotonic() < deadline, f"no {needle!r} in {seen}"
        with contextlib.suppress(queue.Empty):
            seen.append(lines.get(timeout=0.5))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_worker_and_the_server_cleanly(tmp_path: Path, sig: int) -> None:
    port = free_port()
    env = {
        **os.environ,
        "APPELLATE_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.sqlite3'}",
        "APPELLATE_DATA_DIR": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, "-m", "app.cli", "serve", "--with-worker", "--device", "cpu"]
    server = subprocess.Popen(
        [*command, "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines, seen = _lines(server.stdout), []
    children: list[psutil.Process] = []
    deadline = time.monotonic() + 120
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz", deadline)
        _wait_for_line(lines, WORKER_READY, deadline, seen)
        children = psutil.Process(server.pid).children(recursive=True)
        assert len(children) == 1 and "worker" in children[0].cmdline()
        server.send_signal(sig)
        code = server.wait(timeout=90)
        worker = children[0]
        survived = worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        for child in children:  # whatever the outcome, leave no process behind
            if child.is_running():
                child.kill()
    assert not survived, f"worker {worker.pid} still running after the server exited"
    assert code == 0
    # The worker stopped itself (it was not killed), before the server exited.
    _wait_for_line(lines, "job worker stopped (exit code 0)", time.monotonic() + 5, seen)
    assert any("worker stopped after 0 job(s)" in line for line in seen), "".join(seen)
