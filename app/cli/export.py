"""``appellate export``: a corrected (or original) release and its changelog, or the errata.

``--errata`` writes what review decided about a choice benchmark's labels in the MMLU-Redux
errata schema, with an upstream report in Markdown (:mod:`app.ingest.export.errata`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from app.cli.support import in_store
from app.errors import InvalidInput
from app.ingest.export.benchmark import export_benchmark
from app.services.table.filter_query import parse_filter_query
from app.services.table.instance_filter import InstanceFilter

__all__ = ["export_command", "parse_filter", "register"]


def parse_filter(query: str) -> InstanceFilter:
    """The instance filter of a table page (its URL, or the query string after ``?``).

    Raises
    ------
    typer.BadParameter
        An unknown parameter or a value the page would refuse.

    """
    try:
        return parse_filter_query(query)
    except InvalidInput as exc:
        raise typer.BadParameter(exc.message, param_hint="--filter") from None


def export_command(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name.")],
    out: Annotated[
        Path,
        typer.Argument(
            help="Export file: .jsonl, .csv or .parquet (see --format); a folder with --errata."
        ),
    ],
    labels: Annotated[
        Literal["resolved", "original"],
        typer.Option("--labels", help="Label values to write: after review, or as imported."),
    ] = "resolved",
    fmt: Annotated[
        Literal["jsonl", "csv", "parquet"] | None,
        typer.Option("--format", help="File format (default: from the file suffix)."),
    ] = None,
    k: Annotated[
        int,
        typer.Option("--k", min=1, help="Agreeing annotators needed to override the original."),
    ] = 2,
    filter_query: Annotated[
        str | None,
        typer.Option(
            "--filter",
            help="Only the rows of a table view: its URL or query string, e.g. "
            "'label=reference=A&slice=source=mmlu-pro-law'.",
        ),
    ] = None,
    errata: Annotated[
        bool,
        typer.Option(
            "--errata",
            help="Write review's decisions on 'reference' in the MMLU-Redux errata schema (one "
            "CSV per subject) and upstream-report.md into the folder OUT.",
        ),
    ] = False,
    queue: Annotated[
        int | None, typer.Option("--queue", help="--errata: the items of this review queue.")
    ] = None,
    all_items: Annotated[
        bool, typer.Option("--all", help="--errata: every item decided in review.")
    ] = False,
    resamples: Annotated[
        int, typer.Option("--resamples", help="--errata: bootstrap resamples of the report.")
    ] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="--errata: bootstrap seed.")] = 0,
) -> None:
    """Export a benchmark with resolved or original labels, and a changelog CSV beside it."""
    if errata:
        if (queue is None) == (not all_items):
            raise typer.BadParameter("give --queue ID or --all", param_hint="--errata")
        # Imported here: the report's bootstrap and review code are not a plain export's cost.
        from app.ingest.export.errata import export_errata

        summary = in_store(
            lambda s: export_errata(
                s, benchmark, out, queue=queue, k=k, resamples=resamples, seed=seed
            )
        )
        typer.echo(summary.line())
        return
    if queue is not None or all_items:
        raise typer.BadParameter("--queue and --all choose the items of --errata")
    flt = parse_filter(filter_query) if filter_query is not None else None
    summary = in_store(
        lambda s: export_benchmark(s, benchmark, out, fmt=fmt, labels=labels, k=k, flt=flt)
    )
    typer.echo(summary.line())


def register(app: typer.Typer) -> None:
    """Add ``export`` to ``app`` (the ``appellate`` command line)."""
    app.command("export")(export_command)
