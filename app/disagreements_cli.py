"""``appellate disagreements``: a thin wrapper over the disagreement finder."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from app.cli_support import JsonOption, LabelOption, PositiveOption, fmt_num, in_store
from app.services.disagreements import MODES, disagreements

__all__ = ["disagreements_command", "register"]


def disagreements_command(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name.")],
    detector: Annotated[
        list[str],
        typer.Option("--detector", "-d", help="Detector (repeat for consensus mode)."),
    ],
    label: LabelOption = "reference",
    min_confidence: Annotated[
        float | None,
        typer.Option(
            "--min-confidence", help="Cut on P(other class) (default 0.8; cleanlab: none)."
        ),
    ] = None,
    mode: Annotated[str, typer.Option("--mode", help=" | ".join(MODES))] = "threshold",
    judge: Annotated[
        str | None,
        typer.Option("--judge", help="detector-vs-judge: judge whose AB choice is compared."),
    ] = None,
    k: Annotated[
        int | None, typer.Option("--k", help="Consensus: detectors that must disagree.")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Show at most N items.")] = None,
    positive: PositiveOption = None,
    as_json: JsonOption = False,
) -> None:
    """Items where detectors confidently contradict the labels, a judge, or a judge's other order.

    ``--mode detector-vs-judge --judge NAME`` compares the detector's P(A) with the judge's AB
    choice.
    """
    if mode not in MODES:
        raise typer.BadParameter(f"choose from {', '.join(MODES)}", param_hint="--mode")
    found = in_store(
        lambda s: disagreements(
            s,
            benchmark,
            detector,
            label=label,
            mode=mode,
            min_confidence=min_confidence,
            k=k,
            positive=positive,
            limit=limit,
            judge=judge,
        ).as_dict()
    )
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    typer.echo(f"{found['total']} item(s), {mode} mode, label {found['label']}")
    for item in found["items"]:
        typer.echo(
            f"{item['external_id']}\tlabel {item['label']}\tscore {fmt_num(item['score'])}\t"
            f"confidence {fmt_num(item['confidence'])}\t{item['reason']}"
        )


def register(cli: typer.Typer) -> None:
    """Add the ``disagreements`` command to the ``appellate`` app."""
    cli.command("disagreements")(disagreements_command)
