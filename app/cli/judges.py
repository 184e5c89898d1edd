"""``appellate judges``: the position-bias panel of a benchmark's judges, side by side."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from app.cli.support import JsonOption, fmt_num, in_store
from app.services.metrics.bias_panel import FIGURES, judge_panel

__all__ = ["judges_command"]


def _ci(interval: list[float] | None) -> str:
    return "" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"


def _print_panel(panel: dict[str, Any]) -> None:
    typer.echo(
        f"{panel['benchmark']}: {len(panel['judges'])} judge(s), "
        f"{panel['resamples']} group-bootstrap resamples, seed {panel['seed']}"
    )
    for row in panel["judges"]:
        typer.echo(f"{row['judge']}: n {row['n']}, retained {row['retained']}")
        for f in FIGURES:
            typer.echo(f"  {f.title}: {fmt_num(row[f.name])}{_ci(row[f'{f.name}_ci'])}")
    for d in panel["differences"]:
        typer.echo(f"{d['first']} - {d['second']} on {d['n']} shared pairs:")
        for f in FIGURES:
            typer.echo(f"  {f.title}: {fmt_num(d[f.name])}{_ci(d[f'{f.name}_ci'])}")
    analysis = panel["analysis"]
    typer.echo(f"analysis set: {analysis['n']} pairs in {analysis['groups']} groups")
    for key in ("reason", "folds_reason"):
        if analysis.get(key):
            typer.echo(f"  {analysis[key]}")
    folds = analysis.get("folds")
    if folds:
        for judge, reason in folds["refusals"].items():
            typer.echo(f"  probe of {judge}: {'refused: ' + reason if reason else 'estimable'}")


def judges_command(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name.")],
    judge: Annotated[
        list[str] | None,
        typer.Option("--judge", "-j", help="Judge (repeatable; default: every two-order judge)."),
    ] = None,
    slice_field: Annotated[
        str | None,
        typer.Option("--slice", help="Payload field that stratifies the shared folds."),
    ] = None,
    outer: Annotated[int, typer.Option("--outer", help="Shared outer folds.")] = 5,
    resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap and fold seed.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """The position-bias panel of judges with intervals, paired differences and shared folds."""
    panel = in_store(
        lambda s: judge_panel(
            s,
            benchmark,
            judge,
            resamples=resamples,
            seed=seed,
            slice_field=slice_field,
            outer=outer,
        )
    )
    if as_json:
        typer.echo(json.dumps(panel, indent=2))
    else:
        _print_panel(panel)
