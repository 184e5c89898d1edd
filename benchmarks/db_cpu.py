"""CPU seconds the database server spends for one database, beside the client's own.

PostgreSQL: the server processes that serve the database are its backends, listed with their
pids in ``pg_stat_activity`` (``datname`` = the database; parallel workers included, the
meter's own connection left out); each one's CPU (utime + stime) is read from
``/proc/<pid>/stat``, so the server must run on this machine. A backend's CPU is counted from
the meter's start (or from the backend's own start, if it starts later) to its last reading. A
reading is taken at every :meth:`DatabaseCpu.seconds` call and, with ``sample_every_s``, by a
background thread, so a backend that exits in between (a parallel worker) is counted up to its
last reading: keep the connections whose work is measured open until the final
:meth:`~DatabaseCpu.seconds`. Other databases on the same server are not counted.

SQLite runs inside the client process: its CPU is that process's, and the meter reads ``None``.

This module imports nothing from ``app``: a benchmark loads it by file path in processes that
run a base revision's code (``metrics_job_bench.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, create_engine, make_url, text

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
POSTGRES_BASIS = (
    "PostgreSQL backends of the measured database (pg_stat_activity pids, parallel workers "
    "included), utime + stime from /proc/<pid>/stat"
)
SQLITE_BASIS = "SQLite runs in the client process: its CPU is counted in that process's"
_BACKENDS = text(
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid()"
)


def _proc_cpu(pid: int) -> tuple[int, float] | None:
    """(start time in ticks, CPU seconds) of process ``pid``, or ``None`` once it is gone.

    The start time tells a pid reused by a new process from the one read before.
    """
    try:
        # Fields after the command name (which may hold spaces): utime, stime 14 and 15,
        # starttime 22 (numbered from 1 as in proc(5)).
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[19]), (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class DatabaseCpu:
    """Server CPU seconds spent for the database at ``url`` since the meter started.

    Use as a context manager; :meth:`seconds` reads the total so far (``None`` for SQLite).
    ``sample_every_s`` also reads the backends in a background thread at that interval, so
    short-lived ones (parallel workers) are seen while they run.
    """

    def __init__(self, url: str, *, sample_every_s: float | None = None) -> None:
        self.url = url
        self.postgres = make_url(url).get_backend_name() == "postgresql"
        self.basis = POSTGRES_BASIS if self.postgres else SQLITE_BASIS
        self.backends_started = 0
        self._every = sample_every_s
        self._first: dict[tuple[int, int], float] = {}
        self._last: dict[tuple[int, int], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._engine = create_engine(url, isolation_level="AUTOCOMMIT") if self.postgres else None
        self._conn: Connection | None = None

    def __enter__(self) -> DatabaseCpu:
        if self._engine is None:
            return self
        self._conn = self._engine.connect()
        own = int(self._conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        if _proc_cpu(own) is None:
            self.__exit__(None, None, None)
            raise RuntimeError(
                f"the PostgreSQL server of {make_url(self.url).render_as_string()} does not "
                "run on this machine: its backends' CPU cannot be read from /proc"
            )
        self._read(start=True)
        if self._every:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()

    def seconds(self) -> float | None:
        """CPU seconds of the database's backends since the start; ``None`` for SQLite."""
        if not self.postgres:
            return None
        self._read(start=False)
        with self._lock:
            return sum(self._last[k] - self._first[k] for k in self._last)

    def _sample(self) -> None:
        while not self._stop.wait(self._every):
            self._read(start=False)

    def _read(self, *, start: bool) -> None:
        # One connection, shared by the thread and the caller: the lock serialises them.
        with self._lock:
            if self._conn is None:
                return
            pids = self._conn.execute(_BACKENDS).scalars().all()
            for pid in pids:
                read = _proc_cpu(int(pid))
                if read is None:
                    continue  # exited since the query
                key = (int(pid), read[0])
                if key not in self._first:
                    # Running at the start: counted from now; started since: from its start.
                    self._first[key] = read[1] if start else 0.0
                    self.backends_started += 0 if start else 1
                self._last[key] = read[1]


def run_metered(
    cmd: Sequence[str], url: str, *, cwd: Path, env: Mapping[str, str], sample_every_s: float = 0.02
) -> tuple[dict[str, Any], float | None]:
    """Run a measured child process; the JSON object it prints and the database's CPU meanwhile.

    The child (``cmd``) does its work on the database at ``url``, prints one JSON object on a
    line of its own and then calls :func:`hand_back`, which keeps its connections open until
    this side has read the backends' CPU one last time. Database CPU: from the child's start to
    that reading (``None`` for SQLite, whose CPU is the child's own).
    """
    with (
        tempfile.TemporaryFile(mode="w+") as errors,
        DatabaseCpu(url, sample_every_s=sample_every_s) as meter,
    ):
        child = subprocess.Popen(
            list(cmd), cwd=cwd, env=dict(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=errors, text=True,
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        line = child.stdout.readline()
        database_s = meter.seconds()
        child.stdin.close()
        child.stdout.read()
        if child.wait() != 0 or not line.strip():
            errors.seek(0)
            failed = f"{' '.join(cmd)} failed ({child.returncode})"
            raise RuntimeError(f"{failed}:\n{errors.read()[-3000:]}")
    return json.loads(line), database_s


def hand_back(result: dict[str, Any]) -> None:
    """In a :func:`run_metered` child: print ``result``, then wait until the parent has read.

    Call it before closing the connections the work used (their backends must still run when
    the parent takes its last reading).
    """
    print(json.dumps(result), flush=True)
    sys.stdin.read()
