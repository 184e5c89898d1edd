"""``appellate export``: write a corrected (or original) benchmark release and its changelog."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import parse_qs

import typer
from pydantic import ValidationError

from app.cli_support import in_store
from app.errors import AppellateError
from app.ingest.export import export_benchmark
from app.services.instance_filter import InstanceFilter

__all__ = ["export_command", "parse_filter", "register"]

# The instance table's query parameters; page numbers may come along in a pasted URL.
_LIST_PARAMS = ("label", "slice")
_SCALAR_PARAMS = ("q", "judge", "ab", "ba", "flip", "score_detector", "score_min", "score_max")
_IGNORED_PARAMS = ("page", "page_size")


def parse_filter(query: str) -> InstanceFilter:
    """The instance filter of a table page: its URL, or only the query string after ``?``.

    Parsed by the web page's own parser, so a link pasted from the dashboard exports exactly
    the rows that page lists.

    Parameters
    ----------
    query : str
        ``https://.../benchmarks/NAME?label=reference%3DA&flip=yes`` or
        ``label=reference=A&flip=yes``.

    Returns
    -------
    InstanceFilter
        Unchecked; :func:`~app.ingest.export.export_benchmark` checks it against the benchmark.

    Raises
    ------
    typer.BadParameter
        An unknown parameter or a value the page would refuse.

    """
    # Imported here: FastAPI costs every other command a fifth of a second at start-up.
    from app.web.filters import instance_filter

    _, _, qs = query.rpartition("?")
    params = parse_qs(qs, keep_blank_values=True)
    unknown = sorted(set(params) - {*_LIST_PARAMS, *_SCALAR_PARAMS, *_IGNORED_PARAMS})
    if unknown:
        raise typer.BadParameter(f"unknown filter parameter(s): {', '.join(unknown)}")
    scalars = {}
    for name in _SCALAR_PARAMS:
        values = [v for v in params.get(name, []) if v.strip()]
        # The page keeps the last of a repeated parameter; a blank one means "no condition".
        if values:
            scalars[name] = values[-1]
    lists = {name: params.get(name) for name in _LIST_PARAMS}
    try:
        # The page's dependency does no I/O; it is async only to stay off FastAPI's threads.
        return asyncio.run(instance_filter(**scalars, **lists))  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise typer.BadParameter(problems, param_hint="--filter") from None
    except AppellateError as exc:
        raise typer.BadParameter(exc.message, param_hint="--filter") from None


def export_command(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name.")],
    out: Annotated[
        Path, typer.Argument(help="Export file: .jsonl, .csv or .parquet (see --format).")
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
) -> None:
    """Export a benchmark with resolved or original labels, and a changelog CSV beside it."""
    flt = parse_filter(filter_query) if filter_query is not None else None
    summary = in_store(
        lambda s: export_benchmark(s, benchmark, out, fmt=fmt, labels=labels, k=k, flt=flt)
    )
    typer.echo(summary.line())


def register(app: typer.Typer) -> None:
    """Add ``export`` to ``app`` (the ``appellate`` command line)."""
    app.command("export")(export_command)
