"""``appellate metrics`` and ``appellate disagreements``: thin wrappers over the metric services."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from app.cli_support import in_store
from app.services.disagreements import MODES, disagreements
from app.services.metrics import INTERVAL_METRICS, LABEL_MODES, check_label_mode, metrics_report

__all__ = ["disagreements_command", "metrics_command", "register"]

LabelOption = Annotated[str, typer.Option("--label", "-l", help="Label set to compare with.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
PositiveOption = Annotated[
    str | None,
    typer.Option("--positive", help="Positive class (default: A for A/B sets, 1 for 1/0 sets)."),
]


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _ci(interval: list[float] | None) -> str:
    return "" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"


def _label_mode(report: dict[str, Any]) -> str:
    return f" resolved (k = {report['k']})" if report["labels"] == "resolved" else ""


def _print_report(report: dict[str, Any]) -> None:
    typer.echo(
        f"{report['benchmark']} against {report['label']}{_label_mode(report)} "
        f"(positive {report['positive']!r}), "
        f"{report['resamples']} group-bootstrap resamples, seed {report['seed']}"
    )
    for row in report["rows"]:
        cells = [f"{m} {_num(row[m])}{_ci(row[f'{m}_ci'])}" for m in INTERVAL_METRICS]
        where = "" if row["slice"] is None else f" [{row['slice']}]"
        typer.echo(
            f"{row['detector']}{where}: n {row['n']}, prevalence {_num(row['prevalence'])}, "
            + ", ".join(cells)
        )
    for judge in report["judges"]:
        typer.echo(
            f"judge {judge['judge']}: pairs {judge['pairs']}, retained {judge['retained']}, "
            f"flips {judge['flips']}, flip rate {_num(judge['flip_rate'])}"
            f"{_ci(judge['flip_rate_ci'])}, accuracy AB {_num(judge['accuracy_ab'])}, "
            f"both orders {_num(judge['accuracy_both_orders'])}, agreement flip "
            f"{_num(judge['agreement_flip'])} / non-flip {_num(judge['agreement_nonflip'])}"
        )


def metrics_command(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name.")],
    label: LabelOption = "reference",
    detector: Annotated[
        list[str] | None,
        typer.Option("--detector", "-d", help="Detector (repeatable; default: all with scores)."),
    ] = None,
    slice_field: Annotated[
        str | None, typer.Option("--slice", help="Payload field for per-slice rows.")
    ] = None,
    resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap root seed.")] = 0,
    positive: PositiveOption = None,
    labels: Annotated[
        str,
        typer.Option(
            "--labels",
            help=f"{' | '.join(LABEL_MODES)}: the original labels, or the resolved ones "
            "(adjudication, else k unanimous votes, else the original).",
        ),
    ] = "original",
    k: Annotated[
        int, typer.Option("--k", help="Resolved labels: agreeing voters that override.")
    ] = 2,
    as_json: JsonOption = False,
) -> None:
    """Detector metrics with group-bootstrap 95% intervals, and the pairwise judge summary."""
    report = in_store(
        lambda s: metrics_report(
            s,
            benchmark,
            label,
            detector,
            slice_field=slice_field,
            positive=positive,
            resamples=resamples,
            seed=seed,
            labels=check_label_mode(labels),
            k=k,
        )
    )
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        _print_report(report)


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
            f"{item['external_id']}\tlabel {item['label']}\tscore {_num(item['score'])}\t"
            f"confidence {_num(item['confidence'])}\t{item['reason']}"
        )


def register(cli: typer.Typer) -> None:
    """Add the ``metrics`` and ``disagreements`` commands to the ``appellate`` app."""
    cli.command("metrics")(metrics_command)
    cli.command("disagreements")(disagreements_command)
