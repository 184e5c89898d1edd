"""``appellate answer``, ``rank-errors`` and ``critic``: the jobs of a multiple-choice audit."""

from __future__ import annotations

from typing import Annotated

import typer

from app.services.jobs import queue as job_queue
from app.services.jobs.answer import DEFAULT_TEMPLATE, ChoiceParams
from app.services.jobs.critic import CRITIC_MODES, CriticParams
from app.services.jobs.rank_errors import RankErrorsParams
from app.services.metrics.rankers import DEFAULT_TRAIN_LABEL, RANKERS
from workers.cli.jobs import (
    DeviceOption,
    MaxAttemptsOption,
    WaitOption,
    detector_name_option,
    submit_options,
    template_option,
)

DetectorNameOption = detector_name_option("--detector", "MODEL/choice")
CriticNameOption = detector_name_option("--detector", "critic:MODEL")


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


def critic(
    benchmark: Annotated[str, typer.Argument(help="A choice or answer benchmark.")],
    model: Annotated[
        str, typer.Option("--model", help="Registered local model, or the model id at --server.")
    ],
    detector: CriticNameOption = "",
    server: Annotated[
        str | None,
        typer.Option("--server", help="OpenAI-compatible server URL, e.g. http://host:8000/v1."),
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help=f"{' or '.join(CRITIC_MODES)}: a strictly parsed reply, or the verdict tokens "
            "after a prefilled 'VERDICT:' (local only); default: the model's.",
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="A seeded sample of N items (default all).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the --limit sample.")] = 0,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 256,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 4,
    template_file: Annotated[
        typer.FileText | None,
        typer.Option(
            "--template",
            help="File with the user message ({question}, {options}, {key}, {subject}, {about}).",
        ),
    ] = None,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
    max_attempts: MaxAttemptsOption = job_queue.DEFAULT_MAX_ATTEMPTS,
    *,
    ctx: typer.Context,
) -> None:
    """Ask a model whether each item's labelled answer is right (scores of a critic:* detector)."""
    submit_options(
        ctx,
        CriticParams,
        backend="remote" if server else "local",
        base_url=server,
        mode=mode,
        **template_option(template_file),
    )
