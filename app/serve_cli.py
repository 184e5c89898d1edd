"""``appellate serve``, ``demo`` and ``db``: the store and the web server around it.

``app.cli`` mounts them; uvicorn with the web app, and the demo model's worker code, load
inside the commands that run them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import typer

from app.demo import demo_admin_link, load_demo_data
from app.settings import BUNDLED_DATA, Settings
from app.store import Store
from app.users_cli import signin_url

db_app = typer.Typer(no_args_is_help=True, help="Database maintenance.")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create the store or migrate it to the latest schema."""
    settings = Settings()
    store = Store.open(settings)
    store.close()
    typer.echo(f"database at head: {settings.resolved_database_url}")


def _start_worker(device: str) -> subprocess.Popen[bytes]:
    """One ``appellate worker`` process beside the web server, with the same environment."""
    command = [sys.executable, "-m", "app.cli", "worker", "--device", device]
    return subprocess.Popen(command)


def _serve(
    settings: Settings, host: str, port: int, *, workers: int = 1, job_worker: str | None = None
) -> None:
    # Imported here so that import-only CLI commands do not pay for the web stack.
    import uvicorn

    from app.main import create_app

    runner = _start_worker(job_worker) if job_worker else None
    typer.echo(f"Appellate dashboard: http://{host}:{port}/")
    if runner is not None:
        typer.echo(f"job worker: pid {runner.pid} (device {job_worker})")
    try:
        if workers > 1:
            # Several processes need an import string; they read the same APPELLATE_* settings.
            uvicorn.run(
                "app.main:app_from_environment",
                factory=True,
                host=host,
                port=port,
                workers=workers,
                log_level="warning",
            )
        else:
            uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")
    finally:
        if runner is not None:
            runner.send_signal(signal.SIGTERM)  # finishes its batch and requeues the job
            runner.wait()


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
    """Create the SQLite store, import the bundled real data and serve the dashboard."""
    settings = Settings()
    store = Store.open(settings)
    for line in load_demo_data(store, data):
        typer.echo(line)
    secret = demo_admin_link(store)
    store.close()
    if model:
        # The one worker-side step of the demo: its module loads only when it runs.
        from workers.cli import add_smollm2

        try:
            add_smollm2()
        except typer.Exit:
            typer.echo("the demo model is not available; judging needs a registered model")
    host, port = host or settings.host, port or settings.port
    typer.echo(
        f"sign in as admin (one-time link, 24 h): {signin_url(secret, f'http://{host}:{port}')}"
    )
    if serve_after:
        _serve(settings, host, port, job_worker=device if with_worker else None)
