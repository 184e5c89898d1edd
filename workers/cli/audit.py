"""``appellate answer`` and ``appellate rank-errors``: the jobs of a multiple-choice audit."""

from __future__ import annotations

from typing import Annotated

import typer

from app.services.jobs.answer import DEFAULT_TEMPLATE, ChoiceParams, enqueue_answer_choices
from app.services.metrics.rankers import DEFAULT_TRAIN_LABEL, RANKERS, enqueue_rank_errors
from workers.cli.jobs import (
    DeviceOption,
    WaitOption,
    detector_name_option,
    submit,
    submit_options,
)

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
    submit_options(ctx, ChoiceParams, enqueue_answer_choices, template=template)


def rank_errors(
    benchmark: Annotated[str, typer.Argument(help="A choice or answer benchmark.")],
    ranker: Annotated[
        list[str] | None,
        typer.Option("--ranker", help=f"Ranker (repeatable; default all): {', '.join(RANKERS)}."),
    ] = None,
    train_label: Annotated[
        str,
        typer.Option("--train-label", help="Expert verdicts (1 = wrong label) for the combiner."),
    ] = DEFAULT_TRAIN_LABEL,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
) -> None:
    """Rank items by how likely their label is wrong (scores of ranker:* detectors)."""
    submit(
        lambda s: enqueue_rank_errors(s, benchmark, ranker or None, train_label=train_label),
        wait,
        device,
    )
