"""``appellate serve``, ``demo`` and ``db``: the store and the web server around it.

``app.cli`` mounts them; uvicorn with the web app, and the demo model's worker code, load
inside the commands that run them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import typer

from app.cli.demo import demo_admin_link, load_demo_data
from app.cli.users import signin_url
from app.settings import BUNDLED_DATA, Settings
from app.store import Store

db_app = typer.Typer(no_args_is_help=True, help="Database maintenance.")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create the store or migrate it to the latest schema."""
    settings = Settings()
    store = Store.open(settings)
    store.close()
    typer.echo(f"database at head: {settings.resolved_database_url}")


# How long a stopping worker may take to finish its batch and requeue its job; after that it
# is killed and its lease, no longer renewed, hands the job to the next worker.
WORKER_STOP_SECONDS = 60.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In a child (Linux): get SIGTERM when the server dies, even by SIGKILL."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # no prctl: a child outlives a killed server until its own stop


def _start_child(*args: str) -> subprocess.Popen[bytes]:
    """``appellate ARGS`` as a child process with this one's environment and output."""
    linux = sys.platform.startswith("linux")
    command = [sys.executable, "-m", "app.cli", *args]
    return subprocess.Popen(command, preexec_fn=_die_with_parent if linux else None)


def _start_worker(device: str) -> subprocess.Popen[bytes]:
    """One ``appellate worker`` process beside the web server."""
    return _start_child("worker", "--device", device)


class _Stop:
    """SIGTERM and SIGINT of the serving process: remembered, and passed on to what runs.

    uvicorn installs its own handlers while it serves, then restores these and raises the
    signal again: the default SIGTERM action would end the process there, before the
    worker is stopped, and leave it running re-parented to PID 1.
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self.server: Any = None
        self.stopping: subprocess.Popen[bytes] | None = None

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.server is not None:
            self.server.should_exit = True
        if self.stopping is not None and self.stopping.poll() is None:
            self.stopping.kill()  # a second signal while the worker stops: do not wait

    @contextmanager
    def installed(self) -> Iterator[_Stop]:
        """Handle both signals inside the block; the previous handlers come back after it."""
        previous = {sig: signal.signal(sig, self) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stop_child(self, child: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` to ``child`` and wait until it exits (killed after the grace time)."""
        self.stopping = child
        if child.poll() is None:
            child.send_signal(sig)
        try:
            return child.wait(timeout=WORKER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            return child.wait()


def proxy_options(settings: Settings) -> dict[str, Any]:
    """Uvicorn's forwarded-header options: trusted only from ``settings.forwarded_allow_ips``.

    uvicorn trusts ``X-Forwarded-For`` from loopback peers by default, so anyone reaching a
    server behind no proxy could pick the address the sign-in throttle counts under. With no
    proxy configured (the default) the peer's own address is the client's.
    """
    ips = settings.forwarded_allow_ips.strip()
    return {"proxy_headers": bool(ips), "forwarded_allow_ips": ips or None}


def _run_server(settings: Settings, host: str, port: int, workers: int, stop: _Stop) -> None:
    # Imported here so that import-only CLI commands do not pay for the web stack.
    import uvicorn

    if workers > 1:
        # Several processes need an import string; they read the same APPELLATE_* settings.
        # uvicorn's supervisor handles the signals itself and returns.
        uvicorn.run(
            "app.main:app_from_environment",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
            **proxy_options(settings),
        )
        return
    from app.main import create_app

    config = uvicorn.Config(
        create_app(settings), host=host, port=port, log_level="warning", **proxy_options(settings)
    )
    server = uvicorn.Server(config)
    stop.server = server  # a signal from now on ends it, even before it starts serving
    if not stop.received:
        server.run()
    if not server.started and not stop.received:
        raise typer.Exit(3)  # uvicorn's code for a server that could not start


def _serve(
    settings: Settings,
    host: str,
    port: int,
    *,
    workers: int = 1,
    job_worker: str | None = None,
    converter: subprocess.Popen[bytes] | None = None,
) -> None:
    with _Stop().installed() as stop:
        runner = _start_worker(job_worker) if job_worker else None
        typer.echo(f"Appellate dashboard: http://{host}:{port}/")
        if runner is not None:
            typer.echo(f"job worker: pid {runner.pid} (device {job_worker})")
        try:
            _run_server(settings, host, port, workers, stop)
        finally:
            # The children go first: the server never exits and leaves one running alone.
            if converter is not None and converter.poll() is None:
                # SIGINT: the conversion removes its temporary folder as it stops.
                stop.stop_child(converter, signal.SIGINT)
                typer.echo("demo model conversion stopped (it starts again with the next demo)")
            if runner is not None:
                # The worker finishes its batch and requeues its job.
                code = stop.stop_child(runner)
                typer.echo(f"job worker stopped (exit code {code})")


def _progress_bars_on_terminals_only() -> None:
    """No progress bars (tqdm, transformers) in logs: only when stdout is a terminal.

    Set in the environment, so that the worker and the model conversion inherit it; tqdm
    reads it when first imported.
    """
    if not sys.stdout.isatty():
        os.environ.setdefault("TQDM_DISABLE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def _start_model_conversion() -> subprocess.Popen[bytes]:
    """``appellate models add-smollm2`` in the background (a minute or two on a CPU)."""
    return _start_child("models", "add-smollm2")


def _convert_model_here() -> None:
    # The one worker-side step of the demo: its module loads only when it runs.
    from workers.cli.models import add_smollm2

    try:
        add_smollm2()
    except typer.Exit:
        typer.echo("the demo model is not available; judging needs a registered model")


WorkersOpt = typer.Option(1, "--workers", min=1, help="Web server processes.")
WithWorkerOpt = typer.Option(
    False, "--with-worker/--no-worker", help="Also run one job worker process."
)
DeviceOpt = typer.Option("auto", "--device", help="Job worker device: auto, cpu or cuda:N.")


def serve(
    host: str = typer.Option(None, help="Bind address (default APPELLATE_HOST or 127.0.0.1)."),
    port: int = typer.Option(None, help="Port (default APPELLATE_PORT or 8000)."),
    workers: int = WorkersOpt,
    with_worker: bool = WithWorkerOpt,
    device: str = DeviceOpt,
) -> None:
    """Serve the dashboard on an existing store."""
    _progress_bars_on_terminals_only()
    settings = Settings()
    Store.open(settings).close()
    _serve(
        settings,
        host or settings.host,
        port or settings.port,
        workers=workers,
        job_worker=device if with_worker else None,
    )


def demo(
    host: str = typer.Option(None, help="Bind address (default APPELLATE_HOST or 127.0.0.1)."),
    port: int = typer.Option(None, help="Port (default APPELLATE_PORT or 8000)."),
    data: Path = typer.Option(BUNDLED_DATA, help="Folder of the bundled data."),
    serve_after: bool = typer.Option(True, "--serve/--no-serve", help="Serve after importing."),
    model: bool = typer.Option(
        True, "--model/--no-model", help="Convert and register the bundled SmolLM2 judge."
    ),
    with_worker: bool = typer.Option(
        True, "--with-worker/--no-worker", help="Run one job worker beside the server."
    ),
    device: str = DeviceOpt,
) -> None:
    """Create the SQLite store, import the bundled real data and serve the dashboard.

    When it serves, the demo model converts in a background process that starts before the
    import (the conversion alone takes longer than everything else): the dashboard answers
    without waiting for it, and judging with the model smollm2 works once it is registered.
    """
    _progress_bars_on_terminals_only()
    settings = Settings()
    store = Store.open(settings)
    converter = _start_model_conversion() if model and serve_after else None
    try:
        for line in load_demo_data(store, data):
            typer.echo(line)
        secret = demo_admin_link(store)
    except BaseException:
        if converter is not None:
            _Stop().stop_child(converter, signal.SIGINT)
        raise
    finally:
        store.close()
    if model and not serve_after:
        _convert_model_here()
    host, port = host or settings.host, port or settings.port
    typer.echo(
        f"sign in as admin (one-time link, 24 h): {signin_url(secret, f'http://{host}:{port}')}"
    )
    if converter is not None:
        typer.echo(
            f"demo model: converting in the background (pid {converter.pid}); judging with "
            "smollm2 works once it prints 'model smollm2: ...'"
        )
    if serve_after:
        _serve(
            settings,
            host,
            port,
            job_worker=device if with_worker else None,
            converter=converter,
        )
