"""``appellate probe data ...``: build the lie-detector datasets as benchmarks (one transaction).

The sub-app :data:`lie_app` is mounted by the main CLI; every command prints one
:class:`~app.ingest.records.ImportSummary` line per benchmark it wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy.orm import Session

from app.cli.support import in_store
from app.ingest.lie.datasets import (
    CONFOUNDER_PREFIX,
    PERSONA_BENCHMARK,
    ROLEPLAY_BENCHMARK,
    TRUTH_BENCHMARK,
    TRUTH_TOPICS,
    build_confounders,
    build_personas,
    build_roleplay,
    build_truth,
)
from app.ingest.lie.formats import CONFOUNDER_SETS, STATEMENT_FORMATS
from app.ingest.records import ImportSummary
from app.settings import BUNDLED_DATA

lie_app = typer.Typer(
    no_args_is_help=True,
    help="Build lie-detector datasets (truth training chats, confounders, personas, role-play).",
)

DataOption = Annotated[
    Path,
    typer.Option(
        "--data", help="Data folder holding truth/ (default: the bundled data).", show_default=False
    ),
]


def _names_option(flag: str, known: tuple[str, ...]) -> Any:
    """The type of a comma-separated option naming some of ``known`` (read by :func:`_names`)."""
    return Annotated[str, typer.Option(flag, help="Comma-separated: " + ", ".join(known))]


FormatsOption = _names_option("--formats", STATEMENT_FORMATS)
SetsOption = _names_option("--sets", CONFOUNDER_SETS)
ALL_FORMATS = ",".join(STATEMENT_FORMATS)
ALL_SETS = ",".join(CONFOUNDER_SETS)


def _run(work: Callable[[Session], list[ImportSummary]]) -> None:
    """One transaction around ``work``, then one summary line per benchmark written."""
    for summary in in_store(work, create=True):
        typer.echo(summary.line())


def _names(value: str, known: tuple[str, ...] | None, option: str) -> list[str]:
    """A comma-separated list; with ``known``, an unknown name is a usage error."""
    names = list(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    if not names:
        raise typer.BadParameter("give at least one name", param_hint=option)
    for name in names:
        if known is not None and name not in known:
            raise typer.BadParameter(
                f"unknown {name!r} (expected {', '.join(known)})", param_hint=option
            )
    return names


@lie_app.command("build-truth")
def build_truth_command(
    formats: FormatsOption = ALL_FORMATS,
    topics: Annotated[
        str,
        typer.Option(
            "--topics",
            help="Comma-separated topics (<topic>.csv, neg_<topic>.csv in <data>/truth).",
        ),
    ] = ",".join(TRUTH_TOPICS),
    benchmark: Annotated[str, typer.Option("--benchmark", "-b")] = TRUTH_BENCHMARK,
    data: DataOption = BUNDLED_DATA,
) -> None:
    """True/false statements as chats in the seed paper's three formats (probe training set)."""
    chosen_formats = _names(formats, STATEMENT_FORMATS, "--formats")
    chosen_topics = _names(topics, None, "--topics")
    _run(
        lambda s: [
            build_truth(s, data, formats=chosen_formats, topics=chosen_topics, benchmark=benchmark)
        ]
    )


@lie_app.command("build-confounders")
def build_confounders_command(
    sets: SetsOption = ALL_SETS,
    prefix: Annotated[
        str, typer.Option("--benchmark-prefix", help="Benchmark name = prefix + set.")
    ] = CONFOUNDER_PREFIX,
    source: Annotated[
        str, typer.Option("--source", help="Statement topic: " + ", ".join(TRUTH_TOPICS))
    ] = "cities",
    compliance_items: Annotated[
        int, typer.Option("--compliance-items", min=1, help="Questions in the compliance set.")
    ] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Seed of every random choice.")] = 0,
    data: DataOption = BUNDLED_DATA,
) -> None:
    """Stress tests where truth is anti-correlated with likelihood, belief or compliance."""
    chosen = _names(sets, CONFOUNDER_SETS, "--sets")
    _run(
        lambda s: build_confounders(
            s,
            data,
            sets=chosen,
            source=source,
            prefix=prefix,
            compliance_n=compliance_items,
            seed=seed,
        )
    )


@lie_app.command("build-personas")
def build_personas_command(
    spp: Annotated[
        bool,
        typer.Option("--spp/--no-spp", help="Also add the shared-persona-prefill variants."),
    ] = False,
    benchmark: Annotated[str, typer.Option("--benchmark", "-b")] = PERSONA_BENCHMARK,
) -> None:
    """Honest vs anti-factual persona answers (on-policy, and SPP with --spp)."""
    _run(lambda s: [build_personas(s, spp=spp, benchmark=benchmark)])


@lie_app.command("build-roleplay")
def build_roleplay_command(
    benchmark: Annotated[str, typer.Option("--benchmark", "-b")] = ROLEPLAY_BENCHMARK,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="Replies table (default: <data>/truth/real_world_scenarios/"
            "all_unambiguous_replies.csv).",
        ),
    ] = None,
    data: DataOption = BUNDLED_DATA,
) -> None:
    """The labelled role-play lie/honest replies as chats."""
    _run(lambda s: [build_roleplay(s, data, benchmark=benchmark, path=file)])
