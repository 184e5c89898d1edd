"""``appellate answer`` and ``appellate rank-errors``: the jobs of a multiple-choice audit."""

from __future__ import annotations

from typing import Annotated

import typer

from app.services.jobs.answer import DEFAULT_TEMPLATE, ChoiceParams
from app.services.jobs.rank_errors import RankErrorsParams
from app.services.metrics.rankers import DEFAULT_TRAIN_LABEL, RANKERS
from workers.cli.jobs import DeviceOption, WaitOption, detector_name_option, submit_options

DetectorNameOption = detector_name_option("--detector", "MODEL/choice")


def answer(
    benchmark: Annotated[str, typer.Argument(help="A choice benchmark.")],
    model: Annotated[str, typer.Option("--model", help="Registered local model.")],
    detector: DetectorNameOption = "",
    limit: Annotated[int | None, typer.Option("--limit", help="First N items only.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 8,
    capture: Annotated[
        bool,
        typer.Option("--capture/--no-capture", help="Keep the state before the answer letter."),
    ] = True,
    template_file: Annotated[
        typer.FileText | None,
        typer.Option(
            "--template",
            help="File with the user message ({question}, {options}, {subject}, {about}).",
        ),
    ] = None,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
    *,
    ctx: typer.Context,
) -> None:
    """Answer a choice benchmark with a local model: option probabilities and activations."""
    template = template_file.read() if template_file is not None else DEFAULT_TEMPLATE
    submit_options(ctx, ChoiceParams, template=template)


def rank_errors(
    benchmark: Annotated[str, typer.Argument(help="A choice or answer benchmark.")],
    rankers: Annotated[
        list[str] | None,
        typer.Option("--ranker", help=f"Ranker (repeatable; default all): {', '.join(RANKERS)}."),
    ] = None,
    train_label: Annotated[
        str,
        typer.Option("--train-label", help="Expert verdicts (1 = wrong label) for the combiner."),
    ] = DEFAULT_TRAIN_LABEL,
    apply_from: Annotated[
        str | None,
        typer.Option(
            "--apply-from",
            help="Score with the combiner frozen on this benchmark (no fitting, no verdicts).",
        ),
    ] = None,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
    *,
    ctx: typer.Context,
) -> None:
    """Rank items by how likely their label is wrong (scores of ranker:* detectors)."""
    submit_options(ctx, RankErrorsParams, rankers=list(rankers or []))
