"""Shared CLI parts: opening the store in one transaction, common options, output formats."""

from __future__ import annotations

import json
from collections.abc import Callable
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


def in_store(work: Callable[[Session], T]) -> T:
    """Run ``work(session)`` in one transaction; a domain error prints one line and exits 2."""
    settings = Settings()
    store = Store.open(settings)
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
