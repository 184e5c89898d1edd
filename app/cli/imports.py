"""``appellate import ...`` commands: thin wrappers that open a transaction and call an importer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy.orm import Session

from app.cli.support import in_store
from app.ingest.alpaca_eval import import_alpaca_eval
from app.ingest.arena_hard import DEFAULT_BASELINE, import_arena_hard
from app.ingest.helm import import_helm
from app.ingest.inspect_logs import import_inspect_logs
from app.ingest.judgebench import import_judgebench
from app.ingest.lm_eval import import_lm_eval
from app.ingest.mmlu_redux import import_mmlu_redux
from app.ingest.mtbench import import_mtbench
from app.ingest.mtbench_human import HUMAN_LABEL, import_mtbench_human
from app.ingest.mtbench_judgments import import_mtbench_judgments
from app.ingest.records import ImportSummary
from app.ingest.statements import import_statements
from app.ingest.table import import_table
from app.services.jobs.warm_up import queue_warm_up
from app.tables import Job

import_app = typer.Typer(
    no_args_is_help=True, help="Import benchmarks, labels, judgments and scores."
)

BenchmarkOption = Annotated[
    str | None, typer.Option("--benchmark", "-b", help="Target benchmark name.")
]


def _text(flag: str, help: str) -> Any:
    """An optional text option (a column name, mostly) of ``appellate import table``."""
    return Annotated[str | None, typer.Option(flag, help=help)]


def _repeated(flag: str, help: str) -> Any:
    """A repeatable ``NAME=COLUMN`` option of ``appellate import table``."""
    return Annotated[list[str] | None, typer.Option(flag, help=help)]


# The column mapping of `appellate import table`, one option each. Every COLUMN may be a
# nested path into a column's value (app.ingest.paths): doc.question, doc.choices.0, doc.choices[0].
MapOption = _repeated(
    "--map",
    "FIELD=COLUMN payload mapping (repeatable); COLUMN here and in the other options may be a "
    "nested path: doc.question, doc.choices.0 or doc.choices[0].",
)
GroupOption = _text("--group", "Group (question) column.")
LabelsOption = _repeated("--label", "NAME=COLUMN label set (repeatable).")
ScoresOption = _repeated("--score", "DETECTOR=COLUMN score (repeatable).")
IdOption = _text("--id", "External id column (default: row number).")
OptionsOption = _text("--options", "choice: column holding each item's list of options.")
OptionOption = _repeated("--option", "choice: LETTER=COLUMN, one per option (repeatable).")
ReferenceOption = _text("--reference", "Column of the reference (label set 'reference').")
AnswersOption = _repeated("--answers", "MODEL=COLUMN of a model's answers (repeatable).")
GraderOption = _text("--grader", "answer: exact | normalized | numeric[:TOL] | regex:PATTERN.")


def _run(work: Callable[[Session], list[ImportSummary]]) -> None:
    """One transaction around ``work`` and the warm-ups it calls for, then a line per call."""

    def imported(session: Session) -> list[tuple[ImportSummary, Job | None]]:
        summaries = work(session)
        # In the import's transaction: a big benchmark's warm-up is queued exactly when the
        # import lands. One per benchmark, however many files named it.
        names = dict.fromkeys(s.benchmark for s in summaries if s.benchmark)
        jobs = {name: queue_warm_up(session, name) for name in names}
        return [(s, jobs.get(s.benchmark)) for s in summaries]

    shown: set[int] = set()
    for summary, job in in_store(imported, create=True):
        typer.echo(summary.line())
        if job is not None and job.id not in shown:
            shown.add(job.id)
            typer.echo(f"{summary.benchmark}: job {job.id} queued to prepare its first views")


def _pairs(values: list[str] | None, option: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; a malformed item is a usage error."""
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise typer.BadParameter(f"expected NAME=COLUMN, got {item!r}", param_hint=option)
        if key in out:
            raise typer.BadParameter(f"{key!r} given twice", param_hint=option)
        out[key] = value
    return out


@import_app.command("judgebench")
def judgebench_command(
    pairs: Annotated[
        list[Path] | None, typer.Argument(help="JudgeBench pairs files (.jsonl).")
    ] = None,
    outputs: Annotated[
        list[Path] | None,
        typer.Option("--outputs", "-o", help="Judge-output file (repeatable)."),
    ] = None,
    benchmark: BenchmarkOption = None,
) -> None:
    """JudgeBench pairs and judge / reward-model outputs (both orders, flips derived)."""
    if not pairs and not outputs:
        raise typer.BadParameter("give pairs files, --outputs files or both")
    _run(
        lambda s: [
            import_judgebench(s, pairs or [], outputs or [], benchmark=benchmark or "judgebench")
        ]
    )


@import_app.command("mtbench")
def mtbench_command(
    questions: Annotated[Path, typer.Option("--questions", help="question.jsonl")],
    answers: Annotated[Path, typer.Option("--answers", help="Folder of <model>.jsonl answers.")],
    models: Annotated[
        str | None,
        typer.Option(
            "--models", help="Comma-separated models (default: the first two alphabetically)."
        ),
    ] = None,
    benchmark: BenchmarkOption = None,
) -> None:
    """Pairs of two models' first-turn answers to the same MT-Bench question."""
    chosen = [m.strip() for m in models.split(",") if m.strip()] if models else None
    _run(
        lambda s: [
            import_mtbench(s, questions, answers, models=chosen, benchmark=benchmark or "mt-bench")
        ]
    )


@import_app.command("statements")
def statements_command(
    files: Annotated[list[Path], typer.Argument(help="statement,label CSV files.")],
    benchmark: Annotated[
        str | None,
        typer.Option("--benchmark", "-b", help="One benchmark for all files (default: per stem)."),
    ] = None,
) -> None:
    """True/false statement sets; label set 'truth'."""
    _run(lambda s: [import_statements(s, f, benchmark=benchmark) for f in files])


@import_app.command("mmlu-redux")
def mmlu_redux_command(
    paths: Annotated[list[Path], typer.Argument(help="Subject CSV files or folders of them.")],
    benchmark: Annotated[
        str, typer.Option("--benchmark", "-b", help="Target benchmark name.")
    ] = "mmlu-redux",
) -> None:
    """MMLU-Redux subjects: questions, labels, expert errata and every model's answers."""
    _run(lambda s: [import_mmlu_redux(s, paths, benchmark)])


@import_app.command("table")
def table_command(
    file: Annotated[
        Path, typer.Argument(help="A .csv, .jsonl, .json (an array of objects) or .parquet table.")
    ],
    kind: Annotated[
        str, typer.Option("--kind", help="pairwise | response | statement | choice | answer")
    ],
    maps: MapOption = None,
    group: GroupOption = None,
    labels: LabelsOption = None,
    scores: ScoresOption = None,
    id_column: IdOption = None,
    benchmark: BenchmarkOption = None,
    options: OptionsOption = None,
    option: OptionOption = None,
    reference: ReferenceOption = None,
    answers: AnswersOption = None,
    grader: GraderOption = None,
) -> None:
    """Any CSV, JSONL, JSON-array or Parquet table through a column mapping (nested paths too)."""
    mapping = _pairs(maps, "--map")
    label_map = _pairs(labels, "--label")
    score_map = _pairs(scores, "--score")
    if reference is not None:
        if "reference" in label_map:
            raise typer.BadParameter("give the reference once", param_hint="--reference")
        label_map["reference"] = reference
    if kind == "answer" and grader is None:
        grader = "normalized"
    _run(
        lambda s: [
            import_table(
                s,
                file,
                kind,
                mapping,
                group=group,
                labels=label_map,
                scores=score_map,
                id_column=id_column,
                benchmark=benchmark,
                options=options,
                option_columns=_pairs(option, "--option"),
                answers=_pairs(answers, "--answers"),
                grader=grader,
            )
        ]
    )


# Published judge outputs of other evaluation tools: FastChat's MT-Bench judgments,
# Arena-Hard-Auto games and AlpacaEval annotations.

JudgmentPaths = Annotated[list[Path], typer.Argument(help="Judgment files or folders of them.")]


@import_app.command("mtbench-judgments")
def mtbench_judgments_command(
    paths: JudgmentPaths,
    questions: Annotated[
        Path | None,
        typer.Option("--questions", help="question.jsonl (with --answers: texts from files)."),
    ] = None,
    answers: Annotated[
        Path | None, typer.Option("--answers", help="Folder of <model>.jsonl answers.")
    ] = None,
    benchmark: BenchmarkOption = None,
    single_benchmark: Annotated[
        str | None,
        typer.Option(
            "--single-benchmark", help="Benchmark of single grades (default: <benchmark>-single)."
        ),
    ] = None,
) -> None:
    """FastChat MT-Bench judgments: *_pair.jsonl (both orders, flips derived), *_single.jsonl."""
    _run(
        lambda s: import_mtbench_judgments(
            s,
            paths,
            questions=questions,
            answers=answers,
            benchmark=benchmark or "mt-bench",
            single_benchmark=single_benchmark,
        )
    )


@import_app.command("mtbench-human")
def mtbench_human_command(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Human judgment files (.jsonl, .json, .parquet) or folders of them."),
    ],
    benchmark: BenchmarkOption = None,
    label: Annotated[
        str, typer.Option("--label", help="The label set the annotators' votes are cast on.")
    ] = HUMAN_LABEL,
) -> None:
    """MT-Bench human judgments (lmsys/mt_bench_human_judgments): one vote per annotator."""
    _run(lambda s: [import_mtbench_human(s, paths, benchmark=benchmark or "mt-bench", label=label)])


@import_app.command("arena-hard")
def arena_hard_command(
    paths: JudgmentPaths,
    baseline: Annotated[
        str, typer.Option("--baseline", help="The baseline model (the files do not name it).")
    ] = DEFAULT_BASELINE,
    benchmark: BenchmarkOption = None,
) -> None:
    """Arena-Hard-Auto model_judgment files: games[0] baseline first, games[1] swapped."""
    _run(
        lambda s: [
            import_arena_hard(s, paths, baseline=baseline, benchmark=benchmark or "arena-hard")
        ]
    )


@import_app.command("alpaca-eval")
def alpaca_eval_command(paths: JudgmentPaths, benchmark: BenchmarkOption = None) -> None:
    """AlpacaEval annotations.json: one judgment per pair, in one unrecorded order."""
    _run(lambda s: [import_alpaca_eval(s, paths, benchmark=benchmark or "alpaca-eval")])


# Evaluation logs of other harnesses: Inspect AI logs and HELM run folders.


@import_app.command("inspect")
def inspect_command(
    paths: Annotated[
        list[Path], typer.Argument(help="Inspect logs (.eval, .json) or folders of them.")
    ],
    benchmark: Annotated[
        str | None,
        typer.Option(
            "--benchmark", "-b", help="One benchmark for all logs (default: one per task)."
        ),
    ] = None,
) -> None:
    """Inspect AI logs: one benchmark per task, one detector per model, every scorer's value."""
    _run(lambda s: import_inspect_logs(s, paths, benchmark=benchmark))


@import_app.command("helm")
def helm_command(
    paths: Annotated[
        list[Path],
        typer.Argument(help="HELM run folders (or folders of them), scenario_state.json, zips."),
    ],
    benchmark: Annotated[
        str | None,
        typer.Option(
            "--benchmark", "-b", help="One benchmark for all runs (default: helm-<scenario>)."
        ),
    ] = None,
) -> None:
    """HELM multiple-choice runs: one detector per run's model, the correct reference as label."""
    _run(lambda s: import_helm(s, paths, benchmark=benchmark))


@import_app.command("lm-eval")
def lm_eval_command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="samples_<task>_<time>.jsonl files or run folders (with results_*.json)."
        ),
    ],
    benchmark: BenchmarkOption = None,
    question: _text(
        "--question", "Doc field of the item's text (dotted path, e.g. doc.question)."
    ) = None,
    choices: _text(
        "--choices", "Doc field of the option texts (dotted path, e.g. choices.text)."
    ) = None,
    grader: GraderOption = None,
) -> None:
    """lm-evaluation-harness --log_samples output: one detector per run, items by doc_hash."""
    _run(
        lambda s: [
            import_lm_eval(
                s,
                paths,
                benchmark=benchmark,
                question_field=_doc_path(question),
                choices_field=_doc_path(choices),
                grader=grader,
            )
        ]
    )


def _doc_path(path: str | None) -> str | None:
    """A path into ``doc``: a leading ``doc.`` (as the samples file nests it) is optional."""
    return path.removeprefix("doc.") if path else None
