"""The ``appellate`` command line (Typer): every subcommand, where it lives, and what it does.

Commands are imported when they run (see :mod:`app.cli.lazy`), so ``appellate --help`` and a
quick command do not load the web stack, the importers or the workers (torch, transformers,
scikit-learn) of the commands they do not use.
"""

from __future__ import annotations

import typer

from app.cli.lazy import Lazy, LazyGroup

# In listing order; each summary is the first paragraph of the command's own help.
COMMANDS: tuple[Lazy, ...] = (
    Lazy(
        "metrics",
        "app.cli.metrics:metrics_command",
        "Detector metrics with group-bootstrap 95% intervals, and the pairwise judge summary.",
    ),
    Lazy(
        "disagreements",
        "app.cli.disagreements:disagreements_command",
        "Items where detectors confidently contradict the labels, a judge, or a judge's other "
        "order.",
    ),
    Lazy(
        "judges",
        "app.cli.judges:judges_command",
        "The position-bias panel of judges with intervals, paired differences and shared folds.",
    ),
    Lazy(
        "judge",
        "workers.cli.jobs:judge",
        "Judge a pairwise benchmark in both orders with a local or remote model.",
    ),
    Lazy(
        "rejudge",
        "workers.cli.jobs:rejudge",
        "Re-judge in the other order only the one-order pairs a flip ranker flags first.",
    ),
    Lazy(
        "savings",
        "app.cli.savings:savings_command",
        "Flips recovered against extra judge calls when re-judging the pairs a ranker flags.",
    ),
    Lazy(
        "extract",
        "workers.cli.jobs:extract",
        "Capture residual activations of a benchmark's instances into an activation set.",
    ),
    Lazy(
        "answer",
        "workers.cli.audit:answer",
        "Answer a choice benchmark with a local model: option probabilities and activations.",
    ),
    Lazy(
        "rank-errors",
        "workers.cli.audit:rank_errors",
        "Rank items by how likely their label is wrong (scores of ranker:* detectors).",
    ),
    Lazy(
        "critic",
        "workers.cli.audit:critic",
        "Ask a model whether each item's labelled answer is right (scores of a critic:* detector).",
    ),
    Lazy(
        "worker",
        "workers.cli.jobs:worker",
        "Run queued jobs until SIGTERM/SIGINT (the current batch finishes, the job is requeued).",
    ),
    Lazy(
        "export",
        "app.cli.export:export_command",
        "Export a benchmark with resolved or original labels, and a changelog CSV beside it.",
    ),
    Lazy("serve", "app.cli.serve:serve", "Serve the dashboard on an existing store."),
    Lazy(
        "demo",
        "app.cli.serve:demo",
        "Create the SQLite store, import the bundled real data and serve the dashboard.",
    ),
    Lazy("db", "app.cli.serve:db_app", "Database maintenance."),
    Lazy(
        "import", "app.cli.imports:import_app", "Import benchmarks, labels, judgments and scores."
    ),
    Lazy("models", "workers.cli.models:models_app", "Register and list local language models."),
    Lazy("probe", "workers.cli.probe:probe_app", "Fit, apply and list probes."),
    Lazy("users", "app.cli.users:users_app", "Users, sign-in links and API tokens."),
    Lazy("jobs", "workers.cli.jobs:jobs_app", "List, follow, cancel and retry background jobs."),
)


class AppellateGroup(LazyGroup):
    """The ``appellate`` group: :data:`COMMANDS`, each imported when it runs."""

    lazy = COMMANDS


cli = typer.Typer(cls=AppellateGroup, no_args_is_help=True)


@cli.callback()
def appellate() -> None:
    """Audit benchmark labels and detector disagreements."""


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
