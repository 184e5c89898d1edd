"""The ``appellate`` command line (Typer): database, import, serve and demo commands."""

from __future__ import annotations

from pathlib import Path

import typer

from app.demo import BUNDLED_DATA, load_demo_data
from app.ingest.cli import import_app
from app.metrics_cli import register as register_metrics
from app.settings import Settings
from app.store import Store
from workers.cli import models_app
from workers.jobs_cli import register as register_jobs

cli = typer.Typer(no_args_is_help=True, help="Audit benchmark labels and detector disagreements.")
db_app = typer.Typer(no_args_is_help=True, help="Database maintenance.")
cli.add_typer(db_app, name="db")
cli.add_typer(import_app, name="import")
cli.add_typer(models_app, name="models")
register_metrics(cli)
register_jobs(cli)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create the store or migrate it to the latest schema."""
    settings = Settings()
    store = Store.open(settings)
    store.close()
    typer.echo(f"database at head: {settings.resolved_database_url}")


def _serve(settings: Settings, host: str, port: int) -> None:
    # Imported here so that import-only CLI commands do not pay for the web stack.
    import uvicorn

    from app.main import create_app

    typer.echo(f"Appellate dashboard: http://{host}:{port}/")
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")


@cli.command()
def serve(
    host: str = typer.Option(None, help="Bind address (default APPELLATE_HOST or 127.0.0.1)."),
    port: int = typer.Option(None, help="Port (default APPELLATE_PORT or 8000)."),
) -> None:
    """Serve the dashboard on an existing store."""
    settings = Settings()
    Store.open(settings).close()
    _serve(settings, host or settings.host, port or settings.port)


@cli.command()
def demo(
    host: str = typer.Option(None, help="Bind address (default APPELLATE_HOST or 127.0.0.1)."),
    port: int = typer.Option(None, help="Port (default APPELLATE_PORT or 8000)."),
    data: Path = typer.Option(BUNDLED_DATA, help="Folder of the bundled data."),
    serve_after: bool = typer.Option(True, "--serve/--no-serve", help="Serve after importing."),
) -> None:
    """Create the SQLite store, import the bundled real data and serve the dashboard."""
    settings = Settings()
    store = Store.open(settings)
    for line in load_demo_data(store, data):
        typer.echo(line)
    store.close()
    if serve_after:
        _serve(settings, host or settings.host, port or settings.port)


def main() -> None:
    """Console-script entry point."""
    cli()
