"""Shared CLI parts: opening the store in one transaction, common options, output formats."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from sqlalchemy import make_url
from sqlalchemy.orm import Session

from app.db import transaction
from app.errors import AppellateError, NotFound
from app.settings import Settings
from app.store import Store

T = TypeVar("T")

LabelOption = Annotated[
    str | None,
    typer.Option(
        "--label",
        "-l",
        help="Label set to compare with (default: reference, else the benchmark's first).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
JsonArrayOption = Annotated[bool, typer.Option("--json", help="One JSON array.")]
PositiveOption = Annotated[
    str | None,
    typer.Option("--positive", help="Positive class (default: A for A/B sets, 1 for 1/0 sets)."),
]


def fmt_num(value: float | None) -> str:
    """A number with three decimals for terminal tables, or an em dash when undefined."""
    return "—" if value is None else f"{value:.3f}"


def missing_store(settings: Settings) -> Path | None:
    """The SQLite file the settings name when it does not exist; None for any other store.

    Opening a store creates a missing SQLite file: a read command run in the wrong directory
    (or with another ``APPELLATE_DATA_DIR``) would leave an empty store there and then report
    that nothing is found. A server URL (PostgreSQL) names a database that exists or fails.
    """
    url = make_url(settings.resolved_database_url)
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:"):  # a URI filename: SQLite's own rules apply
        return None
    path = Path(database)
    return None if path.exists() else path.resolve()


def open_store(settings: Settings, *, create: bool = False) -> Store:
    """The configured store; without ``create``, a missing SQLite file is an error (exit 2).

    The commands that make a store (``demo``, ``db upgrade``, the imports, adding a user or a
    model) pass ``create``; every other one says that there is no store at that path.
    """
    missing = None if create else missing_store(settings)
    if missing is not None:
        typer.echo(
            f"error: no store at {missing} (nothing was created there): run the command where "
            "the store is, set APPELLATE_DATA_DIR or APPELLATE_DATABASE_URL, or create one "
            "with appellate demo, appellate db upgrade or an appellate import command",
            err=True,
        )
        raise typer.Exit(2)
    return Store.open(settings)


def in_store(work: Callable[[Session], T], *, create: bool = False) -> T:
    """Run ``work(session)`` in one transaction; a domain error prints one line and exits 2.

    ``create``: make the store if it is missing (see :func:`open_store`).
    """
    settings = Settings()
    store = open_store(settings, create=create)
    try:
        with transaction(store.factory) as session:
            return work(session)
    except NotFound as exc:
        # Most often the wrong store (another directory, another APPELLATE_DATABASE_URL).
        typer.echo(f"error: {exc} (in the store {store_name(settings)})", err=True)
        raise typer.Exit(2) from None
    except AppellateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        store.close()


def store_name(settings: Settings) -> str:
    """The store's URL as a user can recognise it, without its password."""
    return make_url(settings.resolved_database_url).render_as_string(hide_password=True)


def echo_rows(
    rows: list[dict[str, Any]],
    as_json: bool,
    line: Callable[[dict[str, Any]], str],
    empty: str | None = None,
) -> None:
    """Print ``rows`` as one JSON array, or one ``line(row)`` each (``empty`` if there are none)."""
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows and empty is not None:
        typer.echo(empty)
    for row in rows:
        typer.echo(line(row))
