"""``appellate disagreements``: a thin wrapper over the disagreement finder.

Mode parameters are taken generically (``--param NAME=VALUE``), so a new mode needs no edit
here; ``--min-confidence``, ``--k`` and ``--judge`` are shorthands for three of them.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from app.cli.support import JsonOption, LabelOption, PositiveOption, fmt_num, in_store
from app.services.disagreements.disagreement_query import mode_param_names, parse_disagreement_query
from app.services.disagreements.lists import MODES, find_disagreements
from app.services.disagreements.modes import modes_declaring

__all__ = ["disagreements_command", "register"]


def _param_help() -> str:
    """Every mode parameter with the modes declaring it, from the registry."""
    parts = []
    for name in mode_param_names():
        owners = modes_declaring(name)
        param = owners[0].param(name)
        assert param is not None
        parts.append(f"{name} ({', '.join(m.name for m in owners)}): {param.help}")
    return "Mode parameter NAME=VALUE (repeatable). " + " ".join(parts)


def _raw_params(pairs: list[str]) -> dict[str, list[str]]:
    """``NAME=VALUE`` options as raw query parameters."""
    raw: dict[str, list[str]] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise typer.BadParameter(f"expected NAME=VALUE, got {pair!r}", param_hint="--param")
        raw.setdefault(name.strip(), []).append(value)
    return raw


def _known_mode(value: str) -> str:
    """Refuse an unknown ``--mode`` (eager: before a missing option or anything else)."""
    if value not in MODES:
        raise typer.BadParameter(f"unknown mode {value!r}; choose from {', '.join(MODES)}")
    return value


def disagreements_command(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name.")],
    detector: Annotated[
        list[str],
        typer.Option("--detector", "-d", help="Detector (repeat for consensus mode)."),
    ],
    label: LabelOption = None,
    min_confidence: Annotated[
        float | None,
        typer.Option(
            "--min-confidence",
            help="Same as --param min_confidence=X: cut on P(other class) "
            "(default 0.8; cleanlab: none).",
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option("--mode", help=" | ".join(MODES), is_eager=True, callback=_known_mode),
    ] = "threshold",
    judge: Annotated[
        str | None,
        typer.Option("--judge", help="Same as --param judge=NAME (detector-vs-judge)."),
    ] = None,
    k: Annotated[
        int | None, typer.Option("--k", help="Same as --param k=N (consensus quorum).")
    ] = None,
    param: Annotated[list[str] | None, typer.Option("--param", "-p", help=_param_help())] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Show at most N items.")] = None,
    positive: PositiveOption = None,
    as_json: JsonOption = False,
) -> None:
    """Items where detectors confidently contradict the labels, a judge, or a judge's other order.

    '--mode detector-vs-judge --judge NAME' compares the detector's P(A) with the judge's AB
    choice; '--mode margin --param band=0.05' lists the items a detector is unsure about.
    """
    raw = _raw_params(param or [])
    shorthands = {"min_confidence": min_confidence, "k": k, "judge": judge, "limit": limit}
    for name, value in shorthands.items():
        if value is not None:
            raw.setdefault(name, []).append(str(value))
    raw.update(detector=detector, label=[label or ""], mode=[mode], positive=[positive or ""])
    found = in_store(
        lambda s: find_disagreements(
            s, benchmark, parse_disagreement_query(raw, strict=True)
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
