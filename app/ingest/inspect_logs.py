"""Inspect AI evaluation logs (``.eval`` zip and ``.json``), read through package ``inspect-ai``.

The log format evolves with Inspect, so it is never parsed by hand: ``inspect_ai.log`` reads the
header and streams the samples. Each task becomes one benchmark, each log's model one detector,
and the logs of one task by different models join by sample id. A task whose samples carry
``choices`` is a ``choice`` benchmark (the target letter is the label, each model's answer its
prediction); any other task is an ``answer`` benchmark graded ``normalized``. Every scorer's
value becomes a score of the detector ``inspect/<scorer>/<model>`` (kind ``judge`` for a
model-graded scorer, ``external`` otherwise).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.orm import Session

from app.errors import AppellateError, InvalidInput
from app.ingest.finalize import finalize_import
from app.ingest.judge_files import input_files, number
from app.ingest.readers import RECORD, display_name
from app.ingest.records import ImportSummary, PredictionIn, Record, ScoreIn, SourceFields
from app.ingest.values import answer_text, identifier
from app.ingest.writer import DEFAULT_CHUNK_ROWS, record_import, write_records
from app.services.evidence.benchmarks import ensure_benchmark
from app.services.evidence.choices import option_letter, parse_options
from app.services.evidence.detectors import ensure_detector
from app.services.evidence.graders import set_grader
from app.sql.storable import MAX_LABEL_LENGTH
from app.tables import Benchmark, BenchmarkKind

if TYPE_CHECKING:  # the package is optional: imported where a log is read
    from inspect_ai.log import EvalLog, EvalSample

T = TypeVar("T")

__all__ = ["INSTALL_HINT", "MissingPackage", "import_inspect_logs", "score_value"]

IMPORTER = "inspect"
GRADER = "normalized"
"""The grader of generative tasks: close to Inspect's ``match`` and ``includes`` scorers."""
INSTALL_HINT = "pip install 'appellate[formats]' (or: pip install inspect-ai)"
PATTERNS = ("*.eval", "*.json")
# Inspect's letter values (inspect_ai.scorer CORRECT, INCORRECT, PARTIAL, NOANSWER) on the
# 0-1 scale its own value_to_float gives them.
LETTER_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
_WORD_VALUES = {"yes": 1.0, "true": 1.0, "correct": 1.0, "no": 0.0, "false": 0.0, "incorrect": 0.0}
SOURCE_FIELDS = SourceFields(
    external_id="id",
    group_key="id",
    payload={"question": "input", "options": "choices", "task": "eval.task", "targets": "target"},
    labels={"reference": "target"},
)
NOTES = {
    "source": "Inspect AI evaluation logs (inspect.aisi.org.uk), read with inspect_ai.log",
    "licence": "the task's dataset keeps its own terms",
}


class MissingPackage(AppellateError):
    """An optional package an importer needs is not installed."""


def _inspect_log() -> Any:
    """The ``inspect_ai.log`` module, or a message saying how to install it."""
    try:
        # Imported here: the package is optional and only this importer needs it.
        import inspect_ai.log as log
    except ImportError:
        raise MissingPackage(
            f"reading Inspect logs needs the optional package inspect-ai: {INSTALL_HINT}",
            field="inspect-ai",
        ) from None
    return log


def score_value(value: Any) -> dict[str, float]:
    """One score per scorer value: ``{"": x}`` for a scalar, ``{key: x}`` per key of a dict.

    Letters C/I/P/N read as Inspect reads them (1, 0, 0.5, 0), as do yes/no and true/false;
    numbers and booleans as they are.

    Raises
    ------
    ValueError
        For a value that is no number, no known letter or word, or a list.

    """
    if isinstance(value, dict):
        out: dict[str, float] = {}
        for key, inner in value.items():
            for sub, score in score_value(inner).items():
                out[f"{key}.{sub}" if sub else str(key)] = score
        return out
    if isinstance(value, bool):
        return {"": float(value)}
    if (as_number := number(value)) is not None:
        return {"": as_number}
    if isinstance(value, str):
        text = value.strip()
        if text in LETTER_VALUES:
            return {"": LETTER_VALUES[text]}
        if text.lower() in _WORD_VALUES:
            return {"": _WORD_VALUES[text.lower()]}
        try:
            return {"": float(text)}
        except ValueError:
            pass
    raise ValueError(
        f"expected a number, C/I/P/N, yes/no, true/false or an object of them, got {value!r}"
    )


def _input_text(value: Any) -> str:
    """The sample's input as text: a string as it is, chat messages as ``role: text`` lines."""
    if isinstance(value, str):
        return value
    messages = list(value)
    if len(messages) == 1:
        return str(messages[0].text)
    return "\n\n".join(f"{m.role}: {m.text}" for m in messages)


def _model_graded(name: str, metadata: dict[str, Any] | None) -> bool:
    """Whether a scorer asked a model to grade (Inspect's model_graded_* keep its ``grading``)."""
    return "model_graded" in name or bool(metadata and "grading" in metadata)


@dataclass
class _Detectors:
    """Detector ids of one import, created when first met (few: models times scorers)."""

    session: Session
    source: str
    ids: dict[str, int] = field(default_factory=dict)

    def id(self, name: str, kind: str, details: dict[str, Any]) -> int:
        found = self.ids.get(name)
        if found is None:
            detector = ensure_detector(
                self.session, name, kind, details={**details, "imported_from": self.source}
            )
            found = self.ids[name] = detector.id
        return found


@dataclass
class _Log:
    """What a log's header says that every record of it needs."""

    file: str
    task: str
    model: str
    choice: bool
    detectors: _Detectors
    ignored: int = 0


def _error(log: _Log, line: int, field: str, reason: str) -> InvalidInput:
    return InvalidInput(reason, file=log.file, line=line, field=field)


def _label(log: _Log, line: int, target: Any, options: list[str] | None) -> tuple[str | None, Any]:
    """The reference label and, for several targets, the full list for the payload."""
    targets = [target] if isinstance(target, str) else list(target)
    try:
        if options is not None:
            if len(targets) > 1:
                raise ValueError(
                    f"several correct targets {targets!r}: a choice item holds one reference "
                    "letter (import the task's answers with `appellate import table` instead)"
                )
            return option_letter(targets[0] if targets else None, len(options)), None
        first = next((t for t in targets if t.strip()), None)
        reference = answer_text(first, MAX_LABEL_LENGTH) if first is not None else None
    except ValueError as exc:
        raise _error(log, line, "target", str(exc)) from None
    return reference, (targets if len(targets) > 1 else None)


def _answer(sample: EvalSample, choice: bool) -> str | None:
    """The model's answer in one epoch, None for a sample that failed or answered nothing.

    A scorer's extracted ``answer``, else (generative tasks only) the completion.
    """
    if sample.error is not None:
        return None
    for score in (sample.scores or {}).values():
        if isinstance(score.answer, str) and score.answer.strip():
            return score.answer.strip()
    if choice:
        # Without a scorer's answer no letter can be told from free text reliably.
        return None
    completion = sample.output.completion if sample.output is not None else ""
    return completion.strip() or None


def _record(log: _Log, line: int, epochs: list[EvalSample]) -> Record:
    """One item from every epoch of one sample (epoch 1 first)."""
    first = epochs[0]
    try:
        external_id = identifier(first.id)
    except ValueError as exc:
        raise _error(log, line, "id", str(exc)) from None
    payload: dict[str, Any] = {"question": _input_text(first.input), "task": log.task}
    options = None
    if log.choice:
        try:
            payload["options"] = options = parse_options(list(first.choices or []))
        except ValueError as exc:
            raise _error(log, line, "choices", str(exc)) from None
    reference, targets = _label(log, line, first.target, options)
    if targets is not None:
        payload["targets"] = targets
    record = Record(line, external_id, external_id, payload)
    if reference is not None:
        record.labels["reference"] = reference
    _add_prediction(log, line, record, epochs)
    _add_scores(log, line, record, epochs)
    return record


def _add_prediction(log: _Log, line: int, record: Record, epochs: list[EvalSample]) -> None:
    answers = [_answer(s, log.choice) for s in epochs]
    answer = answers[0]
    if answer is None:
        log.ignored += 1
        return
    try:
        answer = answer_text(answer)
    except ValueError as exc:
        raise _error(log, line, "output", str(exc)) from None
    if answer is None:
        log.ignored += 1
        return
    first = epochs[0]
    details: dict[str, Any] = {}
    if first.output is not None and first.output.model:
        details["model"] = first.output.model
    completion = first.output.completion if first.output is not None else ""
    if completion.strip() != answer:
        details["completion"] = completion
    if len(epochs) > 1:
        details["epoch_answers"] = answers
    detector = log.detectors.id(log.model, "model", {"format": "inspect", "model": log.model})
    record.predictions = [PredictionIn(detector, answer, None, details, field="output")]


def _add_scores(log: _Log, line: int, record: Record, epochs: list[EvalSample]) -> None:
    """Every scorer's value (the mean over epochs, Inspect's default reducer) as a score."""
    values: dict[str, list[float]] = {}
    first: dict[str, Any] = {}
    for sample in epochs:
        for scorer, score in (sample.scores or {}).items():
            try:
                parts = score_value(score.value)
            except ValueError as exc:
                raise _error(log, line, f"scores.{scorer}.value", str(exc)) from None
            for key, value in parts.items():
                name = f"{scorer}.{key}" if key else scorer
                values.setdefault(name, []).append(value)
                first.setdefault(name, (scorer, score))
    for name, scores in values.items():
        scorer, score = first[name]
        judge = _model_graded(scorer, score.metadata)
        detector = log.detectors.id(
            f"inspect/{name}/{log.model}",
            "judge" if judge else "external",
            {"format": "inspect", "scorer": scorer, "model": log.model, "model_graded": judge},
        )
        details: dict[str, Any] = {"value": score.value}
        if isinstance(score.answer, str):
            details["answer"] = score.answer
        completion = epochs[0].output.completion if epochs[0].output is not None else ""
        if isinstance(score.explanation, str) and score.explanation != completion:
            details["explanation"] = score.explanation
        if len(scores) > 1:
            details["epoch_values"] = scores
            details["reducer"] = "mean"
        mean = sum(scores) / len(scores)
        record.scores.append(ScoreIn(detector, mean, details, field=f"scores.{scorer}.value"))


def _records(log: _Log, samples: Iterable[EvalSample], epochs: int) -> Iterator[Record]:
    """Records in sample order; a log of several epochs gathers each sample's epochs first."""
    if epochs <= 1:
        for line, sample in enumerate(samples, 1):
            yield _record(log, line, [sample])
        return
    # Inspect writes the epochs of a sample apart; they are gathered by id (memory follows the
    # number of samples of one log, not its size).
    gathered: dict[Any, tuple[int, list[EvalSample]]] = {}
    for line, sample in enumerate(samples, 1):
        gathered.setdefault(sample.id, (line, []))[1].append(sample)
    for line, group in gathered.values():
        yield _record(log, line, sorted(group, key=lambda s: s.epoch))


def _read(path: Path, what: str, call: Callable[[], T]) -> T:
    """``call()``, any failure of the reader becoming a refusal of the file."""
    try:
        return call()
    except AppellateError:
        raise
    # The reader's errors (zip, JSON, validation) vary with its version.
    except Exception as exc:
        detail = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise InvalidInput(
            f"not a readable Inspect log ({what}): {detail}",
            file=display_name(path),
            line=1,
            field=RECORD,
        ) from None


def _samples(module: Any, path: Path) -> Iterator[EvalSample]:
    """The log's samples, streamed (``.eval``) or read whole (``.json``) by Inspect."""
    stream = _read(
        path,
        "samples",
        lambda: module.read_eval_log_samples(os.fspath(path), all_samples_required=False),
    )
    while True:
        sample = _read(path, "samples", lambda: next(stream, None))
        if sample is None:
            return
        yield sample


def task_benchmark(task: str) -> str:
    """The default benchmark of a task: its name without the package (``arc_easy``)."""
    return task.rsplit("/", 1)[-1] or task


def import_inspect_logs(
    session: Session,
    paths: Sequence[str | os.PathLike[str]],
    *,
    benchmark: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> list[ImportSummary]:
    """Import Inspect AI logs (``.eval`` or ``.json``), or folders searched for them.

    One benchmark per task (default: the task's name without its package, e.g. ``arc_easy``),
    one item per sample id (group = id; payload ``{question: input, task}``, plus ``options``
    for a task with ``choices`` and ``targets`` when several targets are given). A task with
    ``choices`` is a ``choice`` benchmark whose ``reference`` is the target letter; any other is
    an ``answer`` benchmark (grader ``normalized``) whose ``reference`` is the first non-empty
    target; an empty target leaves the item unlabelled. The log's model (``eval.model``) is a
    detector of kind ``model``: its prediction is the first scorer's extracted ``answer``, else
    (generative tasks only) the completion; a failed or unanswered sample has none (counted as
    ignored). Every scorer's value is a score of ``inspect/<scorer>/<model>`` (``<scorer>.<key>``
    for a dict value): C/I/P/N as 1/0/0.5/0. Epochs: the prediction is the first epoch's answer
    (details keep every epoch's), a score the mean over epochs (details keep each value).

    Parameters
    ----------
    session
        The caller's session (one transaction for all logs: bad input changes nothing).
    paths
        Log files, or folders searched recursively for ``*.eval`` and ``*.json``.
    benchmark
        One benchmark for every log; its logs must then all be of one task.
    chunk_size
        Records per bulk write.

    Returns
    -------
    list[ImportSummary]
        One summary per benchmark written, in the order first met.

    Raises
    ------
    MissingPackage
        When ``inspect-ai`` is not installed.
    InvalidInput
        ``file:line: field: reason`` (line = the sample's position in the log) for an
        unreadable log, a log without samples, a target naming no option, several targets on
        a choice item, a score value that is no number.
    Conflict
        When a sample contradicts what is stored (e.g. another input under the same id).

    """
    module = _inspect_log()
    files = input_files(paths, PATTERNS, recursive=True)
    headers = [
        (path, _read(path, "header", lambda p=path: module.read_eval_log(p, header_only=True)))
        for path in files
    ]
    if benchmark is not None:
        tasks = sorted({header.eval.task for _, header in headers})
        if len(tasks) > 1:
            raise InvalidInput(
                f"the logs hold {len(tasks)} tasks ({', '.join(tasks)}) whose sample ids would "
                "collide in one benchmark: import each task with its own --benchmark, or leave "
                "--benchmark out (one benchmark per task)",
                field="benchmark",
            )
    targets: dict[str, Benchmark] = {}
    summaries: dict[str, ImportSummary] = {}
    for path, header in headers:
        counts, target, ignored = _import_log(session, module, path, header, benchmark, chunk_size)
        summary = summaries.setdefault(target.name, ImportSummary())
        targets[target.name] = target
        summary.add(counts)
        summary.ignored += ignored
        summary.files.append(os.fspath(path))
    return [finalize_import(session, targets[name], s) for name, s in summaries.items()]


def _import_log(
    session: Session,
    module: Any,
    path: Path,
    header: EvalLog,
    benchmark: str | None,
    chunk_size: int,
) -> tuple[Any, Benchmark, int]:
    """Write one log; return its counts, its benchmark and the samples without an answer."""
    name = display_name(path)
    spec = header.eval
    samples = _samples(module, path)
    first = next(samples, None)
    if first is None:
        raise InvalidInput(
            f"the log holds no samples (status {header.status}): only logs written with their "
            "samples can be imported",
            file=name,
            line=1,
            field="samples",
        )
    choice = bool(first.choices)
    kind = BenchmarkKind.choice if choice else BenchmarkKind.answer
    described = "multiple-choice" if choice else "generative"
    target = ensure_benchmark(
        session,
        benchmark or task_benchmark(spec.task),
        kind,
        description=f"Inspect task {spec.task} ({described}); one detector per model.",
        **NOTES,
    )
    if not choice:
        set_grader(session, target, GRADER)
    log = _Log(name, spec.task, spec.model, choice, _Detectors(session, path.name))
    epochs = int(getattr(spec.config, "epochs", None) or 1)
    records = _records(log, chain([first], samples), epochs)
    counts = write_records(session, target, name, records, SOURCE_FIELDS, chunk_size=chunk_size)
    record_import(
        session, target, IMPORTER, path, counts, extra={"task": spec.task, "model": spec.model}
    )
    return counts, target, log.ignored
