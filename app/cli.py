"""The ``appellate`` command line (Typer): database, import, serve and demo commands."""

from __future__ import annotations

import typer

from app.ingest.cli import import_app
from app.settings import Settings
from app.store import Store

cli = typer.Typer(no_args_is_help=True, help="Audit benchmark labels and detector disagreements.")
db_app = typer.Typer(no_args_is_help=True, help="Database maintenance.")
cli.add_typer(db_app, name="db")
cli.add_typer(import_app, name="import")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create the store or migrate it to the latest schema."""
    settings = Settings()
    store = Store.open(settings)
    store.close()
    typer.echo(f"database at head: {settings.resolved_database_url}")


def main() -> None:
    """Console-script entry point."""
    cli()
