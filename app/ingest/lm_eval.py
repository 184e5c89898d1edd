"""lm-evaluation-harness ``--log_samples`` output: samples_<task>_<time>.jsonl and results_*.json.

A folder of runs becomes one benchmark: every run configuration (model and settings) is a
detector, every document of a task an item, joined across runs by ``doc_hash``. Multiple-choice
tasks become a ``choice`` benchmark whose predictions carry each model's option distribution
(the softmax of its per-choice log-likelihoods); generative tasks an ``answer`` benchmark whose
``filtered_resps`` are graded by the benchmark's grader.

What the harness leaves unsaid, and what this importer decides:

- **Item identity.** ``<task>:<first 16 hex digits of doc_hash>``; a row without ``doc_hash``
  (harness versions before 0.4.2) is ``<task>:doc<doc_id>``, so files of such versions join
  with each other but not with newer ones.
- **Detector name.** ``<model> [<n>-shot, <dtype>, ...]``: the results file's ``model_name`` (a
  local path reduced to its last folder) and, always, the task's few-shot count and the model's
  dtype, then what else changes a model's answers: a chat template, multi-turn few-shot, a
  system instruction (its SHA-256 prefix), generation kwargs and other ``model_args`` (not
  operational ones like ``device``). The name comes from the run alone, never from the other
  runs of an import, so runs imported one at a time get the same names. Two runs with equal
  settings are one detector; a rerun that answered differently is refused as a conflict.
- **A samples file without its results file** (an upload of the ``.jsonl`` alone): the
  detector is ``lm-eval run <time>`` (the time in the file name), the task's settings are read
  from the rows.
- **Item text.** ``question`` from the doc (``question_field``, a dotted path with list indices,
  or the first of :data:`QUESTION_FIELDS`), else the first prompt the harness built (which holds
  the few-shot examples, so runs with different shots would conflict: name a doc field). The
  payload also keeps ``task`` and the whole ``doc``.
- **Options** (multiple choice): the doc's list of choice texts (``choices_field`` or the first
  of :data:`CHOICE_FIELDS`) when it has one text per request, else the requests' continuations
  without the task's ``target_delimiter``. The reference is ``target``: an index, a letter or an
  option's text.
- **Answers** (multiple choice): the argmax of the log-likelihoods (``filtered_resps``, else
  ``resps``), as the harness's ``acc``; probabilities = their softmax. Where the task scores
  ``acc_norm``, the details add the softmax of the log-likelihoods divided by each choice's
  length in characters (the harness's normalisation) and that argmax. Details keep the raw
  log-likelihoods, ``is_greedy``, ``doc_id`` and the row's metric values.
- **Group**: the task (as a subject is MMLU-Redux's group).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.finalize import finalize_import
from app.ingest.judge_files import input_files
from app.ingest.paths import FieldPath, PathMissing
from app.ingest.readers import Row, display_name, open_table, type_name
from app.ingest.records import ImportSummary, PredictionIn, Record, SourceFields
from app.ingest.values import MAX_ANSWER_LENGTH, answer_text, identifier
from app.ingest.writer import DEFAULT_CHUNK_ROWS, record_import, write_records
from app.services.evidence.benchmarks import ensure_benchmark
from app.services.evidence.choices import MAX_OPTIONS, option_letters
from app.services.evidence.detectors import ensure_detectors
from app.services.evidence.graders import GRADER_KEY, parse_grader, set_grader
from app.sql.storable import MAX_LABEL_LENGTH
from app.tables import BenchmarkKind

__all__ = [
    "CHOICE_FIELDS",
    "QUESTION_FIELDS",
    "import_lm_eval",
    "lm_eval_files",
    "log_softmax_probabilities",
]

IMPORTER = "lm-eval"
SAMPLES = "samples_*.jsonl"
_SAMPLES_NAME = re.compile(
    r"^samples_(?P<task>.+)_(?P<time>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)\.jsonl$"
)
QUESTION_FIELDS = ("question", "query", "problem", "prompt", "input", "text", "sentence", "goal")
"""Doc fields tried, in order, for an item's text when none is named."""
CHOICE_FIELDS = ("choices", "options", "choices.text", "endings", "mc1_targets.choices")
"""Doc fields tried, in order, for the option texts of a multiple-choice item."""
_CHOICE_OUTPUTS = ("multiple_choice", "loglikelihood")
_GENERATIVE_OUTPUTS = ("generate_until", "greedy_until")
# model_args that change how a run is executed, not what the model answers.
_OPERATIONAL_ARGS = frozenset(
    {"pretrained", "dtype", "trust_remote_code", "device", "device_map", "parallelize",
     "batch_size", "max_batch_size", "use_fast_tokenizer", "cache_dir", "offload_folder"}
)  # fmt: skip
_ID_HEX = 16
SOURCE_FIELDS = SourceFields(
    external_id="doc_hash",
    group_key="task",
    payload={"question": "doc", "options": "doc", "doc": "doc", "task": "task"},
    labels={"reference": "target"},
)
NOTES = {
    "description": "lm-evaluation-harness samples: one detector per run configuration, items "
    "joined across runs by doc_hash; group = task.",
    "source": "lm-evaluation-harness --log_samples output (samples_<task>_<time>.jsonl + "
    "results_<time>.json; github.com/EleutherAI/lm-evaluation-harness)",
    "licence": "the evaluated dataset's own terms",
}


def log_softmax_probabilities(loglikelihoods: NDArray[np.float64]) -> NDArray[np.float64]:
    """Softmax of per-choice log-likelihoods: the model's distribution over the options.

    Parameters
    ----------
    loglikelihoods : ndarray, shape (K,)
        Log-likelihood of each choice's continuation (finite).

    Returns
    -------
    ndarray, shape (K,)
        Non-negative, summing to 1; computed from the maximum down so that long continuations
        (log-likelihoods of -1000) do not underflow to 0/0.

    """
    shifted = np.exp(loglikelihoods - loglikelihoods.max())
    return shifted / shifted.sum()


def lm_eval_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The samples files named by ``paths``: files as given, folders searched recursively."""
    return input_files(paths, SAMPLES, recursive=True)


@dataclass(frozen=True)
class _Run:
    """What a samples file's run says about itself (its results file, when there is one)."""

    task: str
    time: str
    detector: str
    details: dict[str, Any]
    config: dict[str, Any]
    n_shot: int | None


@dataclass
class _FileRun:
    """A samples file with its run and the kind of benchmark its task makes."""

    path: Path
    run: _Run
    kind: str
    metrics: list[str] = field(default_factory=list)


def _read_results(path: Path) -> dict[str, Any]:
    name = display_name(path)
    try:
        with path.open(encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"malformed JSON: {exc.msg} (column {exc.colno})", file=name, line=exc.lineno,
            field="record",
        ) from None  # fmt: skip
    except UnicodeDecodeError:
        raise InvalidInput("invalid UTF-8", file=name, field="record") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"expected a JSON object, got {type_name(data)}", file=name, line=1)
    return data


def _results_file(samples: Path, time: str) -> Path | None:
    """``results_<time>.json`` beside ``samples`` (the harness writes them together)."""
    found = samples.with_name(f"results_{time}.json")
    return found if found.is_file() else None


def _model_base(name: str) -> str:
    """A model's name for people: a local path (``/tmp/SmolLM2``) reduced to its last folder."""
    name = name.strip()
    if name.startswith(("/", "./", "../", "~")) or "\\" in name:
        return Path(name.rstrip("/\\")).name or name
    return name


def _model_args(text: Any) -> dict[str, str]:
    """``pretrained=x,dtype=float32`` as a dict (a dict, newer harnesses, as it is)."""
    if isinstance(text, dict):
        return {str(k): str(v) for k, v in text.items()}
    out: dict[str, str] = {}
    for part in str(text or "").split(","):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def _run_of(path: Path) -> _Run:
    """The run of a samples file: detector name and details from its results file."""
    match = _SAMPLES_NAME.match(path.name)
    if match is None:
        raise InvalidInput(
            "expected a name samples_<task>_<YYYY-MM-DDTHH-MM-SS.ffffff>.jsonl, as the harness "
            "writes it (the task and the run's time are read from it)",
            file=display_name(path),
        )
    task, time = match["task"], match["time"]
    results_path = _results_file(path, time)
    if results_path is None:
        name = f"lm-eval run {time}"
        return _Run(task, time, name, {"importer": IMPORTER, "run": time}, {}, None)
    results = _read_results(results_path)
    where = display_name(results_path)
    config = results.get("config") if isinstance(results.get("config"), dict) else {}
    args = _model_args(config.get("model_args"))
    model = results.get("model_name") or args.get("pretrained") or config.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidInput("missing field (and no pretrained= in config.model_args)", file=where,
                           field="model_name")  # fmt: skip
    configs = results.get("configs") if isinstance(results.get("configs"), dict) else {}
    task_config = configs.get(task) if isinstance(configs.get(task), dict) else {}
    n_shots = results.get("n-shot") if isinstance(results.get("n-shot"), dict) else {}
    shots = n_shots.get(task, task_config.get("num_fewshot"))
    n_shot = shots if isinstance(shots, int) and not isinstance(shots, bool) else None
    dtype = str(config.get("model_dtype") or args.get("dtype") or "").removeprefix("torch.")
    settings = [f"{n_shot}-shot" if n_shot is not None else "n-shot unknown"]
    if dtype:
        settings.append(dtype)
    if results.get("chat_template"):
        settings.append("chat")
    if results.get("fewshot_as_multiturn"):
        settings.append("multi-turn")
    if sha := results.get("system_instruction_sha"):
        settings.append(f"system {str(sha)[:8]}")
    if gen := config.get("gen_kwargs"):
        settings.append(f"gen {gen}")
    settings += [f"{k}={v}" for k, v in sorted(args.items()) if k not in _OPERATIONAL_ARGS]
    details = {
        "importer": IMPORTER,
        "model_name": model,
        "model_args": config.get("model_args"),
        "model_dtype": config.get("model_dtype"),
        "model_sha": config.get("model_sha"),
        "n_shot": n_shot,
        "lm_eval_version": results.get("lm_eval_version"),
        "results_file": results_path.name,
    }
    return _Run(task, time, f"{_model_base(model)} [{', '.join(settings)}]", details,
                task_config, n_shot)  # fmt: skip


def _kind(path: Path, run: _Run) -> str:
    """``choice`` or ``answer``: the task's output_type, else the first row's requests."""
    output = run.config.get("output_type")
    if output is None:
        with open_table(path, fmt="jsonl") as table:
            first = next(iter(table))
        requests = _arguments(first)
        generative = (
            len(requests) == 1 and len(requests[0]) > 1 and isinstance(requests[0][1], dict)
        )
        output = "generate_until" if generative else "multiple_choice"
    if output in _GENERATIVE_OUTPUTS:
        return BenchmarkKind.answer
    if output in _CHOICE_OUTPUTS:
        return BenchmarkKind.choice
    raise InvalidInput(
        f"output_type {output!r} gives no answer to audit (multiple_choice and generate_until "
        "tasks are imported)",
        file=display_name(path),
        field="output_type",
    )


def _arguments(row: Row) -> list[list[Any]]:
    """The row's requests as argument lists: ``{gen_args_0: {arg_0, arg_1}}`` or ``[[a, b]]``."""
    raw = row.require("arguments")
    if isinstance(raw, dict):
        keys = sorted(raw, key=lambda k: int(k.rsplit("_", 1)[-1]) if k[-1:].isdigit() else 0)
        out = []
        for key in keys:
            args = raw[key]
            if not isinstance(args, dict):
                raise row.error(f"arguments.{key}", f"expected an object, got {type_name(args)}")
            out.append([args[k] for k in sorted(args, key=lambda k: k.rsplit("_", 1)[-1])])
        return out
    if isinstance(raw, list) and all(isinstance(a, list) for a in raw):
        return raw
    raise row.error("arguments", f"expected an object of requests or a list, got {type_name(raw)}")


def _loglikelihood(row: Row, where: str, value: Any) -> tuple[float, bool | None]:
    """One request's ``[ll, is_greedy]``, ``[[ll, is_greedy]]`` or bare ``ll`` (numbers or text)."""
    while isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
        value = value[0]  # the doubly nested form of older harness versions
    greedy: bool | None = None
    if isinstance(value, list):
        if not 1 <= len(value) <= 2:
            raise row.error(where, f"expected [loglikelihood, is_greedy], got {len(value)} values")
        if len(value) == 2:
            flag = value[1]
            greedy = flag if isinstance(flag, bool) else str(flag) == "True"
        value = value[0]
    try:
        ll = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        ll = math.nan
    if math.isnan(ll) or ll == math.inf:
        raise row.error(where, f"expected a log-likelihood (a number <= 0), got {value!r}")
    return ll, greedy


def _responses(row: Row, count: int) -> tuple[str, list[Any]]:
    """``filtered_resps`` (else ``resps``) as one entry per request, and the field read."""
    for name in ("filtered_resps", "resps"):
        if name in row.data:
            value = row.data[name]
            if not isinstance(value, list) or len(value) != count:
                got = len(value) if isinstance(value, list) else type_name(value)
                raise row.error(name, f"expected one response per request ({count}), got {got}")
            return name, value
    raise row.error("filtered_resps", "missing field (and no resps)")


def _metric_values(row: Row, metrics: Sequence[str]) -> dict[str, Any]:
    names = row.data.get("metrics")
    names = names if isinstance(names, list) else metrics
    return {m: row.data[m] for m in names if isinstance(m, str) and m in row.data}


class _Mapper:
    """Turns one samples file's rows into records (one prediction each: this run's)."""

    def __init__(
        self,
        file: _FileRun,
        detector_id: int,
        question_field: str | None,
        choices_field: str | None,
    ) -> None:
        self.task = file.run.task
        self.kind = file.kind
        self.detector_id = detector_id
        self.question_field = question_field
        self.choices_field = choices_field
        self.delimiter = str(file.run.config.get("target_delimiter", " "))
        metric_list = file.run.config.get("metric_list") or []
        self.metrics = [m.get("metric") for m in metric_list if isinstance(m, dict)]

    def __call__(self, row: Row) -> Record:
        doc = row.require("doc")
        if not isinstance(doc, dict):
            raise row.error("doc", f"expected an object, got {type_name(doc)}")
        requests = _arguments(row)
        if not requests:
            raise row.error("arguments", "no requests")
        payload: dict[str, Any] = {
            "question": self._question(row, doc, requests),
            "task": self.task,
        }
        record = Record(row.line, self._external_id(row), self.task, payload)
        target = row.require("target")
        metrics = _metric_values(row, self.metrics)
        details: dict[str, Any] = {"doc_id": row.data.get("doc_id"), "metrics": metrics}
        if self.kind == BenchmarkKind.choice:
            options = self._options(row, doc, requests)
            payload["options"] = options
            if (reference := self._reference(row, target, options, requests)) is not None:
                record.labels["reference"] = reference
            record.predictions = [self._choice(row, options, requests, details)]
        else:
            if (reference := answer_text(target, MAX_LABEL_LENGTH)) is not None:
                record.labels["reference"] = reference
            record.predictions = [self._generated(row, details)]
        payload["doc"] = doc
        return record

    def _external_id(self, row: Row) -> str:
        doc_hash = row.data.get("doc_hash")
        if doc_hash is None:
            return f"{self.task}:doc{row.convert('doc_id', identifier)}"
        if not isinstance(doc_hash, str) or not re.fullmatch(r"[0-9a-fA-F]{16,}", doc_hash):
            raise row.error("doc_hash", f"expected a hex digest, got {doc_hash!r}")
        return f"{self.task}:{doc_hash[:_ID_HEX].lower()}"

    def _question(self, row: Row, doc: dict[str, Any], requests: list[list[Any]]) -> str:
        if self.question_field:
            try:
                value = FieldPath.of(self.question_field).get(doc)
            except PathMissing as exc:
                raise row.error(f"doc.{self.question_field}", exc.reason) from None
            if not isinstance(value, str):
                raise row.error(
                    f"doc.{self.question_field}", f"expected a string, got {type_name(value)}"
                )
            return value
        for name in QUESTION_FIELDS:
            if isinstance(value := doc.get(name), str) and value.strip():
                return value
        context = requests[0][0] if requests[0] else None
        if not isinstance(context, str):
            raise row.error("arguments", "no doc field holds the question and no prompt is given")
        return context

    def _options(self, row: Row, doc: dict[str, Any], requests: list[list[Any]]) -> list[str]:
        k = len(requests)
        if not 2 <= k <= MAX_OPTIONS:
            raise row.error(
                "arguments", f"a multiple-choice item needs 2 to {MAX_OPTIONS} requests, got {k}"
            )
        for name in [self.choices_field] if self.choices_field else CHOICE_FIELDS:
            try:
                value = FieldPath.of(name).get(doc)
            except PathMissing as exc:
                if self.choices_field:
                    raise row.error(f"doc.{name}", exc.reason) from None
                continue
            if (
                isinstance(value, list)
                and len(value) == k
                and all(isinstance(v, str) for v in value)
            ):
                return value
            if self.choices_field:
                raise row.error(f"doc.{name}", f"expected a list of {k} texts (one per request)")
        out = []
        for i, args in enumerate(requests):
            if len(args) < 2 or not isinstance(args[1], str):
                raise row.error(
                    f"arguments.gen_args_{i}.arg_1", "expected the choice's continuation text"
                )
            out.append(args[1].removeprefix(self.delimiter))
        return out

    def _reference(
        self, row: Row, target: Any, options: list[str], requests: list[list[Any]]
    ) -> str | None:
        letters = option_letters(len(options))
        if target is None or target == "":
            return None
        if isinstance(target, int) and not isinstance(target, bool) and 0 <= target < len(options):
            return letters[target]
        if isinstance(target, str):
            text = target.strip()
            if text.isdigit() and int(text) < len(options):
                return letters[int(text)]
            continuations = [str(a[1]).strip() if len(a) > 1 else None for a in requests]
            for texts in (options, continuations):
                stripped = [str(t).strip() for t in texts]
                if text in stripped:
                    return letters[stripped.index(text)]
            if len(text) == 1 and text.upper() in letters:
                return text.upper()
        raise row.error("target", f"names none of the {len(options)} options: {str(target)[:60]!r}")

    def _choice(
        self, row: Row, options: list[str], requests: list[list[Any]], details: dict[str, Any]
    ) -> PredictionIn:
        source, responses = _responses(row, len(requests))
        pairs = [_loglikelihood(row, f"{source}[{i}]", r) for i, r in enumerate(responses)]
        lls = np.array([ll for ll, _ in pairs], dtype=np.float64)
        letters = option_letters(len(options))
        probs = log_softmax_probabilities(lls)
        details = {**details, "loglikelihoods": lls.tolist(), "is_greedy": [g for _, g in pairs]}
        if "acc_norm" in self.metrics or "acc_norm" in details["metrics"]:
            # The harness's acc_norm: log-likelihood per character of the choice's text.
            lengths = np.array([max(len(o), 1) for o in options], dtype=np.float64)
            norm = log_softmax_probabilities(lls / lengths)
            details["length_normalised"] = dict(zip(letters, norm.tolist(), strict=True))
            details["answer_norm"] = letters[int(np.argmax(norm))]
        answer = letters[int(np.argmax(lls))]
        return PredictionIn(
            self.detector_id,
            answer,
            dict(zip(letters, probs.tolist(), strict=True)),
            details,
            source,
        )

    def _generated(self, row: Row, details: dict[str, Any]) -> PredictionIn:
        source, responses = _responses(row, len(_arguments(row)))
        value = responses[0]
        while isinstance(value, list) and len(value) == 1:
            value = value[0]  # [[text]] in older harness versions and in resps
        if not isinstance(value, str):
            raise row.error(f"{source}[0]", f"expected the generated text, got {type_name(value)}")
        # An empty generation is a real (wrong) answer, kept as one space: answer_text would
        # drop it and the item would look unanswered.
        answer = value or " "
        return PredictionIn(self.detector_id, answer[:MAX_ANSWER_LENGTH], None, details, source)


def _grader(file: _FileRun) -> str:
    """The grader closest to the task's ``exact_match``: ``normalized`` or ``exact``.

    ``normalized`` when the metric ignores case or punctuation.
    """
    for metric in file.run.config.get("metric_list") or []:
        if isinstance(metric, dict) and (
            metric.get("ignore_case") or metric.get("ignore_punctuation")
        ):
            return "normalized"
    return "exact"


def import_lm_eval(
    session: Session,
    paths: Sequence[str | os.PathLike[str]],
    *,
    benchmark: str | None = None,
    question_field: str | None = None,
    choices_field: str | None = None,
    grader: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportSummary:
    """Import lm-evaluation-harness samples files, or folders of runs (searched recursively).

    See the module docstring for what becomes what. All files go into one benchmark, so their
    tasks must all be multiple-choice or all generative.

    Parameters
    ----------
    session
        The caller's session (one transaction for all files: bad input changes nothing).
    paths
        ``samples_<task>_<time>.jsonl`` files or folders holding them with their results files.
    benchmark
        Target benchmark name; default the task's name (``lm-eval`` for several tasks).
    question_field, choices_field
        Dotted paths into ``doc`` (list indices allowed) of the item's text and option texts.
    grader
        Grader of a generative task's answers; default the benchmark's, else from the task's
        ``exact_match`` settings.
    chunk_size
        Records per bulk write.

    Returns
    -------
    ImportSummary
        Counts summed over the files.

    Raises
    ------
    InvalidInput
        ``file:line: field: reason`` for a malformed row or results file, a task with no answer
        to audit, or multiple-choice and generative tasks in one import.
    Conflict
        When an item, label or answer contradicts what is stored (a rerun that answered
        differently under the same settings).

    """
    files = []
    for path in lm_eval_files(paths):
        run = _run_of(path)
        files.append(_FileRun(path, run, _kind(path, run)))
    kinds = {f.kind for f in files}
    if len(kinds) > 1:
        first = next(f for f in files if f.kind != files[0].kind)
        raise InvalidInput(
            f"task {first.run.task!r} is {first.kind} but {files[0].run.task!r} is "
            f"{files[0].kind}: import multiple-choice and generative tasks into separate "
            "benchmarks",
            file=display_name(first.path),
            field="output_type",
        )
    tasks = sorted({f.run.task for f in files})
    name = benchmark or (tasks[0] if len(tasks) == 1 else "lm-eval")
    target = ensure_benchmark(session, name, files[0].kind, **NOTES)
    if files[0].kind == BenchmarkKind.answer:
        spec = grader or (target.details or {}).get(GRADER_KEY) or _grader(files[0])
        try:
            parse_grader(spec)
        except ValueError as exc:
            raise InvalidInput(str(exc), field="grader") from None
        set_grader(session, target, spec)
    detectors = ensure_detectors(session, {f.run.detector: ("model", f.run.details) for f in files})
    summary = ImportSummary()
    for f in files:
        mapper = _Mapper(f, detectors[f.run.detector], question_field, choices_field)
        with open_table(f.path, required=("doc", "target", "arguments"), fmt="jsonl") as table:
            records: Iterator[Record] = (mapper(row) for row in table)
            counts = write_records(
                session, target, table.name, records, SOURCE_FIELDS, chunk_size=chunk_size
            )
        record_import(session, target, IMPORTER, f.path, counts, extra={"detector": f.run.detector})
        summary.add(counts)
        summary.files.append(os.fspath(f.path))
    return finalize_import(session, target, summary)
