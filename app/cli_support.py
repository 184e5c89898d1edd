"""The one way a CLI command opens the store: one transaction, domain errors as one line."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import typer
from sqlalchemy.orm import Session

from app.db import transaction
from app.errors import AppellateError
from app.settings import Settings
from app.store import Store

T = TypeVar("T")


def in_store(work: Callable[[Session], T]) -> T:
    """Run ``work(session)`` in one transaction; a domain error prints one line and exits 2."""
    store = Store.open(Settings())
    try:
        with transaction(store.factory) as session:
            return work(session)
    except AppellateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        store.close()
