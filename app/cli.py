"""The ``appellate`` command line (Typer): every subcommand, where it lives, and what it does.

Commands are imported when they run (see :mod:`app.lazy_cli`), so ``appellate --help`` and a
quick command do not load the web stack, the importers or the workers (torch, transformers,
scikit-learn) of the commands they do not use.
"""

from __future__ import annotations

import typer

from app.lazy_cli import Lazy, LazyGroup

# In listing order; each summary is the first paragraph of the command's own help.
COMMANDS: tuple[Lazy, ...] = (
    Lazy(
        "metrics",
        "app.metrics_cli:metrics_command",
        "Detector metrics with group-bootstrap 95% intervals, and the pairwise judge summary.",
    ),
    Lazy(
        "disagreements",
        "app.disagreements_cli:disagreements_command",
        "Items where detectors confidently contradict the labels, a judge, or a judge's other "
        "order.",
    ),
    Lazy(
        "judge",
        "workers.jobs_cli:judge",
        "Judge a pairwise benchmark in both orders with a local or remote model.",
    ),
    Lazy(
        "extract",
        "workers.jobs_cli:extract",
        "Capture residual activations of a benchmark's instances into an activation set.",
    ),
    Lazy(
        "answer",
        "workers.audit_cli:answer",
        "Answer a choice benchmark with a local model: option probabilities and activations.",
    ),
    Lazy(
        "rank-errors",
        "workers.audit_cli:rank_errors",
        "Rank items by how likely their label is wrong (scores of ranker:* detectors).",
    ),
    Lazy(
        "worker",
        "workers.jobs_cli:worker",
        "Run queued jobs until SIGTERM/SIGINT (the current batch finishes, the job is requeued).",
    ),
    Lazy(
        "export",
        "app.ingest.export_cli:export_command",
        "Export a benchmark with resolved or original labels, and a changelog CSV beside it.",
    ),
    Lazy("serve", "app.serve_cli:serve", "Serve the dashboard on an existing store."),
    Lazy(
        "demo",
        "app.serve_cli:demo",
        "Create the SQLite store, import the bundled real data and serve the dashboard.",
    ),
    Lazy("db", "app.serve_cli:db_app", "Database maintenance."),
    Lazy("import", "app.ingest.cli:import_app", "Import benchmarks, labels, judgments and scores."),
    Lazy("models", "workers.cli:models_app", "Register and list local language models."),
    Lazy("probe", "workers.probe_cli:probe_app", "Fit, apply and list probes."),
    Lazy("users", "app.users_cli:users_app", "Users, sign-in links and API tokens."),
    Lazy("jobs", "workers.jobs_cli:jobs_app", "List, follow, cancel and retry background jobs."),
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
