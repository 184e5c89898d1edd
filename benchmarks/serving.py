"""What the benchmarks that drive a real server share: a fresh database, users, uvicorn, sign-in.

A benchmark seeds a fresh store (:func:`fresh_store`: a temporary SQLite file, or a PostgreSQL
database created on the server named by ``APPELLATE_TEST_POSTGRES_URL`` and dropped afterwards),
adds its users through the app's own services (:func:`add_user`), serves the real app in a
uvicorn subprocess (:func:`serve`) and signs in through ``/login`` as a browser does
(:func:`sign_in`). Server cost is read from ``/proc``: CPU seconds (utime + stime) and resident
memory of the server process and its worker processes, which other load on the machine barely
moves.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from sqlalchemy import Connection, create_engine, text

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.db import transaction  # noqa: E402
from app.services.accounts.users import create_user  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.store import Store  # noqa: E402

PG_ADMIN_URL = os.environ.get(
    "APPELLATE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
PASSWORD = "benchmark password"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]*)"')
_CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]*)">')


# --------------------------------------------------------------------------- stores


def add_server_options(parser: argparse.ArgumentParser, timeout: float) -> None:
    """The options every served benchmark shares: texts, request timeout, the job worker."""
    parser.add_argument("--text-chars", type=int, default=1500, help="characters per text")
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds per request")
    parser.add_argument(
        "--keep-seed",
        action="store_true",
        help="PostgreSQL: keep the seeded database as a template and start from a copy of it "
        "(seeding.seeded_store); drop appellate_seed_* databases by hand when done",
    )
    parser.add_argument(
        "--job-worker",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="start an `appellate worker` beside the server, which computes the metrics of "
        "large benchmarks (its CPU counts as the server's)",
    )


def pg_url(name: str) -> str:
    """The URL of database ``name`` on the benchmarks' PostgreSQL server."""
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


@contextmanager
def pg_admin() -> Iterator[Connection]:
    """An autocommit connection to the server (CREATE and DROP DATABASE need one)."""
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            yield conn
    finally:
        admin.dispose()


@contextmanager
def fresh_store(dialect: str, data_dir: Path, *, template: str | None = None) -> Iterator[Settings]:
    """Settings of a new, migrated store of ``dialect`` (``sqlite`` or ``postgresql``).

    The SQLite file lives in ``data_dir``; a PostgreSQL database gets a random name and is
    dropped (connections and all) when the block ends. ``template`` (PostgreSQL only) names a
    database the new one starts as a copy of (``CREATE DATABASE ... TEMPLATE``).
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    name = None
    url = None
    admin = None
    if template is not None and dialect != "postgresql":
        raise ValueError("only a PostgreSQL store can start from a template database")
    if dialect == "postgresql":
        name = f"appellate_bench_{uuid.uuid4().hex[:10]}"
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        copy = f' TEMPLATE "{template}"' if template else ""
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"{copy}'))
        url = pg_url(name)
    elif dialect != "sqlite":
        raise ValueError(f"unknown database {dialect!r} (sqlite or postgresql)")
    settings = Settings(data_dir=data_dir, database_url=url)
    try:
        Store.open(settings).close()  # migrates
        yield settings
    finally:
        if admin is not None:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


def server_env(settings: Settings) -> dict[str, str]:
    """The ``APPELLATE_*`` variables that make a server process open ``settings``' store."""
    env = {"APPELLATE_DATA_DIR": str(settings.data_dir)}
    if settings.database_url:
        env["APPELLATE_DATABASE_URL"] = settings.database_url
    return env


def add_user(settings: Settings, name: str, role: str = "admin") -> str:
    """Create user ``name`` with ``role`` and :data:`PASSWORD` through the users service."""
    store = Store.open(settings)
    try:
        with transaction(store.factory) as session:
            create_user(session, name, role, PASSWORD)
    finally:
        store.close()
    return name


# --------------------------------------------------------------------------- server


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A served store: the uvicorn process, the optional job worker beside it, the base URL."""

    base: str
    web: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes] | None = None

    @property
    def pids(self) -> list[int]:
        """The processes whose CPU and memory count as the server's (children included)."""
        return [p.pid for p in (self.web, self.worker) if p is not None]


def serve(
    settings: Settings, *, workers: int = 1, job_worker: bool = False, timeout_s: float = 120.0
) -> Server:
    """Start ``uvicorn app.main:app_from_environment`` on ``settings``' store.

    Returns once ``/healthz`` answers 200. ``job_worker`` also starts one ``appellate worker``
    (CPU) beside it, as ``appellate serve --job-worker cpu`` does, for pages whose work runs
    as jobs. The caller stops both with :func:`stop`.
    """
    port = free_port()
    env = {**os.environ, **server_env(settings)}
    cmd = [
        sys.executable, "-m", "uvicorn", "app.main:app_from_environment", "--factory",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
        "--no-access-log", "--workers", str(workers),
    ]  # fmt: skip
    server = Server(f"http://127.0.0.1:{port}", subprocess.Popen(cmd, cwd=ROOT, env=env))
    if job_worker:
        worker = [sys.executable, "-m", "app.cli", "worker", "--device", "cpu"]
        server.worker = subprocess.Popen(worker, cwd=ROOT, env=env)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{server.base}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if server.web.poll() is not None or time.monotonic() > deadline:
            stop(server)
            raise RuntimeError(f"the server did not start (exit code {server.web.returncode})")
        time.sleep(0.1)
    if server.worker is not None:
        time.sleep(2.0)  # a worker that cannot start exits at once
        if server.worker.poll() is not None:
            stop(server)
            raise RuntimeError(f"the job worker exited ({server.worker.returncode})")
    return server


def stop(server: Server) -> None:
    """Stop a server from :func:`serve` and its job worker (SIGTERM, SIGKILL after 30 s)."""
    for proc in (server.worker, server.web):
        if proc is None or proc.poll() is not None:
            continue
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tree(pids: Sequence[int]) -> list[int]:
    """``pids`` and their child processes (uvicorn's workers when there are several)."""
    out: list[int] = []
    for pid in pids:
        try:
            out += [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
        except psutil.NoSuchProcess:
            continue
    return out


def server_cpu_s(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) used so far by processes ``pids`` and their children."""
    total = 0
    for p in _tree(pids):
        try:
            # Fields after the command name (which may hold spaces): utime and stime are 14, 15.
            fields = Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / _CLOCK_TICKS


def server_rss_mib(pids: Sequence[int]) -> float:
    """Resident memory of processes ``pids`` and their children, MiB."""
    pages = 0
    for p in _tree(pids):
        try:
            pages += int(Path(f"/proc/{p}/statm").read_text().split()[1])
        except FileNotFoundError:
            continue
    return round(pages * _PAGE_BYTES / 2**20, 1)


def server_peak_rss_mib(pids: Sequence[int]) -> float:
    """Sum of the resident-memory high-water marks (VmHWM) of ``pids`` and children, MiB.

    An upper bound of their combined peak, comparable with :func:`server_rss_mib`.
    """
    peak = 0
    for p in _tree(pids):
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except FileNotFoundError:
            continue
        found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
        if found:
            peak += int(found.group(1))
    return round(peak / 1024, 1)


# --------------------------------------------------------------------------- clients


def sign_in(client: httpx.Client, name: str, password: str = PASSWORD) -> str:
    """Sign ``client`` in through the ``/login`` form; returns the session's CSRF token."""
    form = client.get("/login")
    found = _CSRF_FIELD.search(form.text)
    if form.status_code != 200 or found is None:
        raise RuntimeError(f"/login: HTTP {form.status_code}, no sign-in form")
    done = client.post(
        "/login",
        data={"name": name, "password": password, "csrf_token": found.group(1), "next": "/"},
        follow_redirects=False,
    )
    if done.status_code != 303:
        raise RuntimeError(f"sign-in of {name!r} failed: HTTP {done.status_code}")
    account = client.get("/account")
    token = _CSRF_META.search(account.text)
    if account.status_code != 200 or token is None:
        raise RuntimeError(f"/account after sign-in: HTTP {account.status_code}")
    return token.group(1)


def get_ok(client: httpx.Client, url: str) -> httpx.Response:
    """GET ``url``; raise unless it answers 200 (a 303 to /login must not be timed as a page)."""
    response = client.get(url)
    if response.status_code != 200:
        raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.text[:200]}")
    return response


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99 and max of ``samples`` (seconds) in milliseconds (nearest rank)."""
    ordered = sorted(samples)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {
        "p50_ms": round(pct(0.50) * 1000, 1),
        "p95_ms": round(pct(0.95) * 1000, 1),
        "p99_ms": round(pct(0.99) * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
        "n": len(ordered),
    }


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]
