"""``appellate import ...`` commands: thin wrappers that open a transaction and call an importer."""

from __future__ import annotations

import typer

import_app = typer.Typer(
    no_args_is_help=True, help="Import benchmarks, labels, judgments and scores."
)
