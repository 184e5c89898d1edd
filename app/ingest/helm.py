"""HELM run folders (``scenario_state.json``, ``run_spec.json``, ``per_instance_stats.json``).

A multiple-choice run (adapter ``multiple_choice_joint``) becomes items of a ``choice`` benchmark:
the options in the letter order the model saw (the run's ``output_mapping``), the reference
tagged ``correct`` as the label, and the run's model as one detector whose answer is its
completion (`` D``) read as a letter. Runs of one scenario by several models join by instance.
A run folder can be given as a folder, as its ``scenario_state.json`` or as a zip of it (the
browser's upload of a folder).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.finalize import finalize_import
from app.ingest.readers import RECORD, display_name, type_name
from app.ingest.records import ImportCounts, ImportSummary, PredictionIn, Record, SourceFields
from app.ingest.values import answer_text, identifier
from app.ingest.writer import DEFAULT_CHUNK_ROWS, record_import, write_records
from app.services.evidence.benchmarks import ensure_benchmark
from app.services.evidence.choices import option_letters
from app.services.evidence.detectors import ensure_detector
from app.tables import Benchmark, BenchmarkKind

__all__ = ["HelmRun", "helm_runs", "import_helm"]

IMPORTER = "helm"
STATE = "scenario_state.json"
SPEC = "run_spec.json"
STATS = "per_instance_stats.json"
JOINT = "multiple_choice_joint"
CORRECT = "correct"
# Run-name arguments that say who answered, not what was asked: left out of item ids so
# that runs of one scenario by several models join.
MODEL_ARGS = ("model", "model_deployment")
SOURCE_FIELDS = SourceFields(
    external_id="instance.id",
    group_key="instance.id",
    payload={"question": "instance.input.text", "options": "output_mapping"},
    labels={"reference": "instance.references"},
)
NOTES = {
    "source": "HELM run folders (github.com/stanford-crfm/helm): scenario_state.json",
    "licence": "the scenario's dataset keeps its own terms",
}


@dataclass(frozen=True)
class HelmRun:
    """One run folder: on disk (``folder``) or inside a zip (``archive`` and ``prefix``)."""

    name: str
    folder: Path | None = None
    archive: Path | None = None
    prefix: str = ""
    # The state file's own name: another one where a run's state was uploaded alone.
    state: str = STATE

    def file(self, member: str) -> str:
        """How a file of the run is named in messages."""
        member = self.state if member == STATE else member
        if self.folder is not None:
            return display_name(self.folder / member)
        return f"{self.archive}:{self.prefix}{member}"

    def read(self, member: str) -> bytes | None:
        """The bytes of one file of the run, None when the run has no such file."""
        if self.folder is not None:
            path = self.folder / (self.state if member == STATE else member)
            return path.read_bytes() if path.is_file() else None
        assert self.archive is not None
        with zipfile.ZipFile(self.archive) as archive:
            try:
                return archive.read(self.prefix + member)
            except KeyError:
                return None

    def json(self, member: str, *, required: bool = False, raw: bytes | None = None) -> Any:
        """One file of the run parsed (from ``raw`` when read already), None when absent."""
        raw = self.read(member) if raw is None else raw
        if raw is None:
            if required:
                raise InvalidInput(f"a HELM run folder needs {member}", file=self.file(member))
            return None
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            line = getattr(exc, "lineno", 1)
            raise InvalidInput(
                f"malformed JSON: {exc}", file=self.file(member), line=line, field=RECORD
            ) from None


def _zip_runs(path: Path) -> list[HelmRun]:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise InvalidInput(f"not a readable zip file: {exc}", file=display_name(path)) from None
    states = sorted(n for n in names if PurePosixPath(n).name == STATE)
    return [
        HelmRun(
            PurePosixPath(n).parent.name or path.stem,
            archive=path,
            prefix=n[: -len(STATE)],
        )
        for n in states
    ]


def helm_runs(paths: Sequence[str | os.PathLike[str]]) -> list[HelmRun]:
    """The run folders named by ``paths``: folders (searched), a run's state (``.json``), zips.

    Raises
    ------
    InvalidInput
        No path, a path holding no run, or a file that is neither a zip nor a run's state.

    """
    if not paths:
        raise InvalidInput("no input given", field="paths")
    runs: list[HelmRun] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = [HelmRun(p.parent.name, folder=p.parent) for p in sorted(path.rglob(STATE))]
        elif path.is_file() and path.suffix.lower() == ".json":
            # A run's scenario_state.json (under any name: the browser keeps the upload's).
            found = [HelmRun(path.parent.name, folder=path.parent, state=path.name)]
        elif path.is_file() and path.suffix.lower() == ".zip":
            found = _zip_runs(path)
        elif not path.exists():
            raise InvalidInput("no such file or folder", file=display_name(path))
        else:
            raise InvalidInput(
                f"not a HELM run: give a run folder, its {STATE} or a zip of the folder",
                file=display_name(path),
            )
        if not found:
            raise InvalidInput(
                f"no HELM run folder ({STATE}) in it (subfolders included)",
                file=display_name(path),
            )
        runs.extend(found)
    return runs


def _scenario_key(run_name: str) -> str:
    """The run's name without its model arguments: ``mmlu:subject=philosophy,method=...``."""
    scenario, sep, args = run_name.partition(":")
    kept = [a for a in args.split(",") if a and a.split("=", 1)[0] not in MODEL_ARGS]
    return f"{scenario}{sep}{','.join(kept)}" if kept else scenario


@dataclass
class _Run:
    """A run as its records need it."""

    file: str
    key: str
    model: str
    detector: int
    args: dict[str, Any]
    exact_match: dict[str, float]
    ignored: int = 0

    def error(self, line: int, field: str, reason: str) -> InvalidInput:
        return InvalidInput(reason, file=self.file, line=line, field=field)


def _get(run: _Run, line: int, value: Any, field: str, kind: type) -> Any:
    if not isinstance(value, kind):
        name = {dict: "an object", list: "an array", str: "a string"}[kind]
        raise run.error(line, field, f"expected {name}, got {type_name(value)}")
    return value


def _options(run: _Run, line: int, mapping: Any) -> tuple[list[str], list[str]]:
    """(letters, option texts) of the output mapping, lettered A, B, ... in order."""
    mapping = _get(run, line, mapping, "output_mapping", dict)
    letters = sorted(mapping)
    if not 2 <= len(letters) <= len(option_letters(26)) or letters != list(
        option_letters(len(letters))
    ):
        raise run.error(
            line, "output_mapping", f"expected option letters A, B, ... in order, got {letters}"
        )
    texts = [mapping[letter] for letter in letters]
    if not all(isinstance(t, str) for t in texts):
        raise run.error(line, "output_mapping", "expected option texts (strings)")
    return letters, texts


def _reference(
    run: _Run, line: int, instance: dict[str, Any], letters: list[str], texts: list[str]
) -> str | None:
    """The letter of the reference tagged ``correct``; None when none is."""
    references = _get(run, line, instance.get("references"), "instance.references", list)
    correct = [
        r.get("output", {}).get("text")
        for r in references
        if isinstance(r, dict) and CORRECT in (r.get("tags") or [])
    ]
    if not correct:
        return None
    if len(correct) > 1:
        raise run.error(
            line,
            "instance.references",
            f"{len(correct)} references are tagged correct: a choice item holds one reference "
            "letter",
        )
    if correct[0] not in texts:
        raise run.error(
            line, "instance.references", f"the correct reference {correct[0]!r} is no option"
        )
    return letters[texts.index(correct[0])]


def _answer(state: dict[str, Any], letters: list[str]) -> str | None:
    """The model's answer: its completion stripped (`` D`` is D); None without one."""
    result = state.get("result")
    if not isinstance(result, dict) or not result.get("success", True):
        return None
    completions = result.get("completions") or []
    text = completions[0].get("text") if completions and isinstance(completions[0], dict) else None
    if not isinstance(text, str) or not text.strip():
        return None
    stripped = text.strip()
    # HELM grades a joint run by the completion's text; an upper-cased letter is that letter.
    return stripped.upper() if stripped.upper() in letters else stripped


def _record(run: _Run, line: int, state: dict[str, Any], trials: list[str | None]) -> Record:
    instance = _get(run, line, state.get("instance"), "instance", dict)
    try:
        instance_id = identifier(instance.get("id"))
    except ValueError as exc:
        raise run.error(line, "instance.id", str(exc)) from None
    text = _get(run, line, (instance.get("input") or {}).get("text"), "instance.input.text", str)
    letters, texts = _options(run, line, state.get("output_mapping"))
    payload: dict[str, Any] = {"question": text, "options": texts, "scenario": run.key}
    if isinstance(instance.get("split"), str):
        payload["split"] = instance["split"]
    for key, value in run.args.items():
        # The scenario's arguments (subject=philosophy) are slices of the benchmark.
        if isinstance(value, str | int | float) and key not in payload:
            payload[key] = value
    external_id = f"{run.key}:{instance_id}"
    record = Record(line, external_id, external_id, payload)
    if (reference := _reference(run, line, instance, letters, texts)) is not None:
        record.labels["reference"] = reference
    answer = _answer(state, letters)
    if answer is None:
        run.ignored += 1
        return record
    try:
        answer = answer_text(answer)
    except ValueError as exc:
        raise run.error(line, "result.completions[0].text", str(exc)) from None
    assert answer is not None
    details: dict[str, Any] = {
        "run": run.key,
        "completion": state["result"]["completions"][0]["text"],
    }
    if instance_id in run.exact_match:
        details["exact_match"] = run.exact_match[instance_id]
    if len(trials) > 1:
        details["trial_answers"] = trials
    record.predictions = [
        PredictionIn(run.detector, answer, None, details, field="result.completions[0].text")
    ]
    return record


def _records(run: _Run, states: list[Any]) -> Iterator[Record]:
    """One record per unperturbed instance; its first train trial gives the answer."""
    first: dict[str, tuple[int, dict[str, Any]]] = {}
    answers: dict[str, list[str | None]] = {}
    for line, state in enumerate(states, 1):
        state = _get(run, line, state, "request_states", dict)
        instance = state.get("instance") if isinstance(state.get("instance"), dict) else {}
        if instance.get("perturbation"):
            # A perturbed copy (typos, dialect) asks another question under the same id.
            run.ignored += 1
            continue
        key = str(instance.get("id"))
        letters = sorted(state.get("output_mapping") or {})
        answers.setdefault(key, []).append(_answer(state, letters))
        if key not in first:
            first[key] = (line, state)
        else:
            run.ignored += 1
    for key, (line, state) in first.items():
        yield _record(run, line, state, answers[key])


def _exact_match(run: HelmRun) -> dict[str, float]:
    """Per instance id, HELM's exact_match of train trial 0 (``per_instance_stats.json``)."""
    stats = run.json(STATS)
    out: dict[str, float] = {}
    for entry in stats if isinstance(stats, list) else []:
        if not isinstance(entry, dict) or entry.get("train_trial_index", 0) != 0:
            continue
        if (entry.get("perturbation") or {}) != {}:
            continue
        for stat in entry.get("stats") or []:
            name = stat.get("name") or {}
            if name.get("name") == "exact_match" and not name.get("perturbation"):
                out[str(entry.get("instance_id"))] = float(stat.get("mean", 0.0))
    return out


def _method(run: HelmRun, adapter: dict[str, Any]) -> None:
    method = adapter.get("method")
    if method == JOINT:
        return
    file = run.file(STATE)
    if isinstance(method, str) and method.startswith("multiple_choice"):
        reason = (
            f"adapter method {method!r} asks for each option in a request of its own; only "
            f"{JOINT} runs (one answer letter per instance) can be read"
        )
    else:
        reason = (
            f"not a multiple-choice run (adapter method {method!r}): its references are "
            "reference answers, not options; only multiple_choice_joint runs can be imported "
            "(a generative run's outputs can go through `appellate import table --kind answer`)"
        )
    raise InvalidInput(reason, file=file, line=1, field="adapter_spec.method")


def import_helm(
    session: Session,
    paths: Sequence[str | os.PathLike[str]],
    *,
    benchmark: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> list[ImportSummary]:
    """Import HELM multiple-choice run folders (folders, ``scenario_state.json`` or zips).

    Item ``<scenario>:<instance id>``, where ``<scenario>`` is the run's name without its
    ``model``/``model_deployment`` arguments (``mmlu:subject=philosophy,method=
    multiple_choice_joint``), so runs of several models join; group = item. Payload
    ``{question, options, scenario, split}`` plus the scenario's arguments (``subject``), the
    options in the letter order of ``output_mapping``. Label ``reference`` = the letter of the
    reference tagged ``correct`` (none tagged: unlabelled). The run's model
    (``adapter_spec.model``) is a detector of kind ``model``; its prediction is the completion
    stripped (an option letter, or kept as given: a wrong answer), details keep the raw
    completion and HELM's ``exact_match``. Perturbed instances and train trials after the first
    are not items (counted as ignored; the trials' answers are kept in details).

    Parameters
    ----------
    session
        The caller's session (one transaction for all runs: bad input changes nothing).
    paths
        Run folders or folders of them, ``scenario_state.json`` files, or zips of run folders.
    benchmark
        One benchmark for every run (default: ``helm-<scenario group>``, e.g. ``helm-mmlu``).
    chunk_size
        Records per bulk write.

    Returns
    -------
    list[ImportSummary]
        One summary per benchmark written, in the order first met.

    Raises
    ------
    InvalidInput
        ``file:line: field: reason`` (line = the request state's position) for a run that is
        not ``multiple_choice_joint``, an output mapping that is not lettered A, B, ..., a
        correct reference that is no option or several correct references.
    Conflict
        When an item contradicts what is stored.

    """
    targets: dict[str, Benchmark] = {}
    summaries: dict[str, ImportSummary] = {}
    for run in helm_runs(paths):
        counts, target, ignored = _import_run(session, run, benchmark, chunk_size)
        summary = summaries.setdefault(target.name, ImportSummary())
        targets[target.name] = target
        summary.add(counts)
        summary.ignored += ignored
        summary.files.append(run.file(STATE))
    return [finalize_import(session, targets[name], s) for name, s in summaries.items()]


def _import_run(
    session: Session, run: HelmRun, benchmark: str | None, chunk_size: int
) -> tuple[ImportCounts, Benchmark, int]:
    """Write one run; return its counts, its benchmark and the states not imported."""
    raw = run.read(STATE)
    assert raw is not None  # found by its scenario_state.json
    state = run.json(STATE, required=True, raw=raw)
    file = run.file(STATE)
    if not isinstance(state, dict):
        raise InvalidInput("expected a JSON object", file=file, line=1, field=RECORD)
    adapter = state.get("adapter_spec")
    if not isinstance(adapter, dict):
        raise InvalidInput("missing field", file=file, line=1, field="adapter_spec")
    _method(run, adapter)
    states = state.get("request_states")
    if not isinstance(states, list) or not states:
        raise InvalidInput(
            "expected a non-empty list of request states", file=file, line=1, field="request_states"
        )
    spec = run.json(SPEC) or {}
    run_name = spec.get("name") if isinstance(spec.get("name"), str) else run.name
    model = adapter.get("model") or adapter.get("model_deployment")
    if not isinstance(model, str) or not model:
        raise InvalidInput("missing field", file=file, line=1, field="adapter_spec.model")
    key = _scenario_key(run_name)
    args = (spec.get("scenario_spec") or {}).get("args") or {}
    group = key.partition(":")[0]
    target = ensure_benchmark(
        session,
        benchmark or f"helm-{group}",
        BenchmarkKind.choice,
        description=f"HELM scenario {group} (multiple choice); one detector per run's model.",
        **NOTES,
    )
    detector = ensure_detector(
        session, model, "model", details={"format": "helm", "model": model, "run": run_name}
    )
    parsed = _Run(file, key, model, detector.id, dict(args), _exact_match(run))
    records = _records(parsed, states)
    counts = write_records(session, target, file, records, SOURCE_FIELDS, chunk_size=chunk_size)
    record_import(
        session,
        target,
        IMPORTER,
        run.name + "/" + STATE,
        counts,
        sha256=hashlib.sha256(raw).hexdigest(),
        extra={"run": run_name, "model": model},
    )
    return counts, target, parsed.ignored
