"""``appellate savings``: the savings curve of selective re-judging on a two-order benchmark."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from app.cli.support import JsonOption, fmt_num, in_store
from app.services.metrics.judge_savings import judge_savings

__all__ = ["savings_command"]


def _ci(bounds: list[float | None]) -> str:
    low, high = bounds
    return "" if low is None or high is None else f" [{low:.3f}, {high:.3f}]"


def _k_ci(bounds: list[float | None]) -> str:
    low, high = bounds
    return "" if low is None or high is None else f" [{low:.0f}, {high:.0f}]"


def print_savings(report: dict[str, Any]) -> None:
    """The report as a few lines: per ranker the k for each target and the area."""
    typer.echo(
        f"{report['benchmark']}: {report['judge']} on {report['n']} pairs judged in both orders "
        f"({report['flips']} flips), {report['resamples']} group-bootstrap resamples"
    )
    for name, curve in report["curves"].items():
        ks = ", ".join(
            f"k for {float(q):.0%} {curve['k_for'][q]}{_k_ci(curve['k_for_ci'][q])}"
            for q in report["targets"]
        )
        typer.echo(f"  {name}: {ks}; area {fmt_num(curve['area'])}{_ci(curve['area_ci'])}")
    for d in report["differences"]:
        typer.echo(f"  area {d['a']} - {d['b']}: {fmt_num(d['area'])}{_ci(d['area_ci'])}")


def savings_command(
    benchmark: Annotated[str, typer.Argument(help="A benchmark judged in both orders.")],
    judge: Annotated[str, typer.Option("--judge", help="The judge detector.")],
    ranker: Annotated[
        list[str] | None,
        typer.Option(
            "--ranker", help="A detector whose scores rank pairs (default: probe and baseline)."
        ),
    ] = None,
    resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap root seed.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """Flips recovered against extra judge calls when re-judging the pairs a ranker flags."""
    report = in_store(
        lambda s: judge_savings(s, benchmark, judge, ranker or None, resamples=resamples, seed=seed)
    )
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        print_savings(report)
