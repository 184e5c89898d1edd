"""``appellate judges``: the position-bias panel of a benchmark's judges, side by side."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from sqlalchemy.orm import Session

from app.cli.support import JsonOption, fmt_num, in_store
from app.errors import InvalidInput, NotFound
from app.services.metrics.bias_panel import FIGURES, judge_panel
from app.services.metrics.judge_savings import judge_savings

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


def _savings(s: Session, benchmark: str, judge: str, resamples: int, seed: int) -> dict[str, Any]:
    """One judge's savings report, or why there is none (e.g. no flip probe fitted yet)."""
    try:
        return judge_savings(s, benchmark, judge, resamples=resamples, seed=seed)
    except (InvalidInput, NotFound) as exc:
        return {"error": str(exc)}


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
    """The position-bias panel of judges with intervals, paired differences and shared folds.

    With --json each judge's savings curves of selective re-judging ride along under
    "savings" (appellate savings shows one judge's in words).
    """

    def read(s: Session) -> dict[str, Any]:
        panel = judge_panel(
            s, benchmark, judge, resamples=resamples, seed=seed, slice_field=slice_field,
            outer=outer,
        )  # fmt: skip
        if as_json:
            panel["savings"] = {
                row["judge"]: _savings(s, benchmark, row["judge"], resamples, seed)
                for row in panel["judges"]
            }
        return panel

    panel = in_store(read)
    if as_json:
        typer.echo(json.dumps(panel, indent=2))
    else:
        _print_panel(panel)
