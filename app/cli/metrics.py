"""``appellate metrics``, a thin wrapper over the metric services; registers ``disagreements``."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from app.cli.disagreements import register as register_disagreements
from app.cli.support import JsonOption, LabelOption, PositiveOption, fmt_num, in_store
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labelled_items import LABEL_MODES, check_label_mode
from app.services.evidence.labels import benchmark_label
from app.services.metrics.metric_matrix import MATRIX_METRICS
from app.services.metrics.metric_results import compute_result, save_result
from app.services.metrics.metrics_query import metrics_query
from app.services.metrics.svg_plots import metrics_figures
from app.services.metrics.type_recall import type_recall

__all__ = ["metrics_command", "register"]


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
        cells = [
            f"{m.name} {fmt_num(row[m.name])}{_ci(row.get(f'{m.name}_ci'))}" for m in MATRIX_METRICS
        ]
        where = "" if row["slice"] is None else f" [{row['slice']}]"
        typer.echo(f"{row['detector']}{where}: n {row['n']}, " + ", ".join(cells))
    for judge in report["judges"]:
        typer.echo(
            f"judge {judge['judge']}: pairs {judge['pairs']}, retained {judge['retained']}, "
            f"flips {judge['flips']}, flip rate {fmt_num(judge['flip_rate'])}"
            f"{_ci(judge['flip_rate_ci'])}, accuracy AB {fmt_num(judge['accuracy_ab'])}, "
            f"both orders {fmt_num(judge['accuracy_both_orders'])}, agreement flip "
            f"{fmt_num(judge['agreement_flip'])} / non-flip {fmt_num(judge['agreement_nonflip'])}"
        )


def metrics_command(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name.")],
    label: LabelOption = None,
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
    types: Annotated[
        str | None,
        typer.Option(
            "--types",
            help="Label set naming each defect's type (e.g. errata): each ranker's recall at "
            "50/100/200 per type, with intervals.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Detector metrics with group-bootstrap 95% intervals, and the pairwise judge summary."""
    # Computed here, never read from the store; then stored for the pages (a short write of
    # its own: a read transaction that then writes can fail beside another SQLite writer).
    result = in_store(
        lambda s: compute_result(
            s,
            metrics_query(
                benchmark,
                benchmark_label(s, get_benchmark(s, benchmark).id, label),
                detector,
                slice_field=slice_field,
                positive=positive,
                resamples=resamples,
                seed=seed,
                labels=check_label_mode(labels),
                k=k,
            ),
            draw=metrics_figures,
        )
    )
    in_store(lambda s: save_result(s, result))
    report = result.report
    if types is not None:
        by_type = in_store(
            lambda s: type_recall(
                s, benchmark, report["label"], types, detector, resamples=resamples, seed=seed
            )
        )
        report = {**report, "per_type": by_type}
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    _print_report(report)
    if types is not None:
        _print_types(report["per_type"])


def _print_types(table: dict[str, Any]) -> None:
    typer.echo(f"recall at k per {table['types']} among {table['label']} ({table['n']} items)")
    for row in table["rows"]:
        typer.echo(f"{row['type']} ({row['defects']} defects):")
        for name, cells in row["recall"].items():
            shown = ", ".join(
                f"R@{m.removeprefix('recall_at_')} {fmt_num(v)}{_ci(cells[f'{m}_ci'])}"
                for m, v in cells.items()
                if not m.endswith("_ci")
            )
            typer.echo(f"  {name}: {shown}")


def register(cli: typer.Typer) -> None:
    """Add the ``metrics`` and ``disagreements`` commands to the ``appellate`` app."""
    cli.command("metrics")(metrics_command)
    register_disagreements(cli)
