"""MT-Bench as a pairwise benchmark: two models' first-turn answers to the same question."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.finalize import finalize_import
from app.ingest.readers import Row, file_sha256, open_table
from app.ingest.records import ImportSummary, Record, SourceFields
from app.ingest.values import identifier
from app.ingest.writer import DEFAULT_CHUNK_ROWS, record_import, write_records
from app.services.evidence.benchmarks import ensure_benchmark
from app.tables import BenchmarkKind

FIELDS = SourceFields(
    external_id="question_id",
    group_key="question_id",
    payload={
        "prompt": "turns[0]",
        "category": "category",
        "response_a": "choices[0].turns[0]",
        "response_b": "choices[0].turns[0]",
        "model_a": "model",
        "model_b": "model",
    },
)
NOTES = {
    "description": "Pairs of two models' first-turn answers to the same MT-Bench question "
    "(no preference labels); group = question, slice = category.",
    "source": "MT-Bench (github.com/lm-sys/FastChat, fastchat/llm_judge/data)",
    "licence": "Apache-2.0",
}


def available_models(answers_dir: str | os.PathLike[str]) -> list[str]:
    """Model names with an answer file (``<model>.jsonl``) in ``answers_dir``, sorted."""
    return sorted(p.stem for p in Path(answers_dir).glob("*.jsonl"))


def import_mtbench(
    session: Session,
    questions_path: str | os.PathLike[str],
    answers_dir: str | os.PathLike[str],
    models: Sequence[str] | None = None,
    benchmark: str = "mt-bench",
    *,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportSummary:
    """Import every unordered pair of the chosen models' first-turn answers per question.

    For models ``[m1, m2, m3]`` the pairs are (m1, m2), (m1, m3), (m2, m3): response A is the
    model listed first. Without ``models`` the first two answer files in alphabetical order are
    used, so the default is deterministic and small. An instance is ``<qid>:<model A>|<model B>``,
    group = question id, payload ``{prompt, response_a, response_b, category, model_a,
    model_b}`` (``category`` is the slice); there are no labels. A question that one of the two
    models did not answer yields no pair and is counted as ignored.

    Answer files are indexed in memory by question (MT-Bench has 80 questions per model); the
    questions file is streamed. One import record is kept, hashed over every file read.

    Parameters
    ----------
    session
        The caller's session; flushed, never committed.
    questions_path
        ``question.jsonl`` (question_id, category, turns).
    answers_dir
        Folder of ``<model>.jsonl`` answer files (question_id, choices[0].turns).
    models
        Model names (answer file stems), at least two, no repeats.
    benchmark
        Target benchmark name (kind ``pairwise``).
    chunk_size
        Records per bulk write.

    Raises
    ------
    InvalidInput
        For unknown models, fewer than two, and malformed question or answer files.
    Conflict
        When a pair contradicts what is stored.

    """
    known = available_models(answers_dir)
    chosen = list(models) if models else known[:2]
    _check_models(chosen, known, os.fspath(answers_dir))
    answers = {m: read_answers(Path(answers_dir) / f"{m}.jsonl") for m in chosen}
    target = ensure_benchmark(session, benchmark, BenchmarkKind.pairwise, **NOTES)
    summary = ImportSummary()
    with open_table(questions_path, required=("question_id", "category", "turns")) as table:
        records = _pairs(table, chosen, answers, summary)
        counts = write_records(session, target, table.name, records, FIELDS, chunk_size=chunk_size)
    files = [Path(questions_path), *(Path(answers_dir) / f"{m}.jsonl" for m in chosen)]
    digest = hashlib.sha256("".join(file_sha256(f) for f in files).encode()).hexdigest()
    record_import(
        session, target, "mtbench", questions_path, counts, sha256=digest, extra={"models": chosen}
    )
    summary.add(counts)
    summary.files = [os.fspath(f) for f in files]
    return finalize_import(session, target, summary)


def _check_models(chosen: list[str], known: list[str], where: str) -> None:
    if len(chosen) < 2:
        raise InvalidInput("need at least two models with answer files", file=where, field="models")
    if len(set(chosen)) != len(chosen):
        raise InvalidInput("a model is listed twice", file=where, field="models")
    for model in chosen:
        if model not in known:
            raise InvalidInput(f"no answer file {model}.jsonl", file=where, field="models")


def _turns(row: Row, field: str) -> list[str]:
    """``row[field]`` (or ``row["choices"][0]["turns"]``): a non-empty list of strings."""
    value = row.require(field)
    path = field
    if field == "choices":
        if not isinstance(value, list) or not value or not isinstance(value[0], dict):
            raise row.error("choices", "expected a non-empty list of objects")
        value, path = value[0].get("turns"), "choices[0].turns"
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise row.error(path, "expected a non-empty list of strings")
    return value


def read_answers(path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """``{question id: every turn's answer}`` of one model's answer file (``<model>.jsonl``)."""
    out: dict[str, list[str]] = {}
    first_line: dict[str, int] = {}
    with open_table(path, required=("question_id", "choices"), fmt="jsonl") as table:
        for row in table:
            qid = row.convert("question_id", identifier)
            if qid in out:
                raise row.error(
                    "question_id", f"duplicate id {qid!r} (also on line {first_line[qid]})"
                )
            out[qid] = _turns(row, "choices")
            first_line[qid] = row.line
    return out


@dataclass(frozen=True)
class Question:
    """One MT-Bench question: its id, category and the user's turns."""

    id: str
    category: str
    turns: list[str]

    @classmethod
    def of(cls, row: Row) -> Question:
        """The question of a ``question.jsonl`` row."""
        return cls(
            row.convert("question_id", identifier), row.text("category"), _turns(row, "turns")
        )


def read_questions(path: str | os.PathLike[str]) -> dict[str, Question]:
    """Every question of ``question.jsonl`` by id (80 for MT-Bench: held in memory)."""
    out: dict[str, Question] = {}
    with open_table(path, required=("question_id", "category", "turns"), fmt="jsonl") as table:
        for row in table:
            question = Question.of(row)
            if question.id in out:
                raise row.error("question_id", f"duplicate id {question.id!r}")
            out[question.id] = question
    return out


def pair_id(question_id: str, model_a: str, model_b: str, turn: int = 1) -> str:
    """The external id of the pair (A = ``model_a``) on one turn of a question.

    Turn 1 is ``<qid>:<model A>|<model B>`` (the id of the answers importer); turn 2, an item
    of its own, adds ``:turn2``.
    """
    base = f"{question_id}:{model_a}|{model_b}"
    return base if turn == 1 else f"{base}:turn{turn}"


def pair_payload(
    prompts: Sequence[str],
    answers_a: Sequence[str],
    answers_b: Sequence[str],
    model_a: str,
    model_b: str,
    turn: int = 1,
    category: str | None = None,
) -> dict[str, Any]:
    """The payload of a pair on ``turn`` (1 or 2) from the user's turns and both models' answers.

    Turn 1: ``{prompt, response_a, response_b, category, model_a, model_b}`` (no category when
    it is unknown). Turn 2 answers the second user turn in the context of the first: the same
    fields for turn 2 plus ``turn`` and the turn-1 exchange as ``turn1_prompt``,
    ``turn1_response_a`` and ``turn1_response_b``.
    """
    k = turn - 1
    payload: dict[str, Any] = {
        "prompt": prompts[k],
        "response_a": answers_a[k],
        "response_b": answers_b[k],
        **({"category": category} if category is not None else {}),
        "model_a": model_a,
        "model_b": model_b,
    }
    if turn > 1:
        payload["turn"] = turn
        payload["turn1_prompt"] = prompts[0]
        payload["turn1_response_a"] = answers_a[0]
        payload["turn1_response_b"] = answers_b[0]
    return payload


def _pairs(
    rows: Iterable[Row],
    models: list[str],
    answers: dict[str, dict[str, list[str]]],
    summary: ImportSummary,
) -> Iterator[Record]:
    for row in rows:
        question = Question.of(row)
        qid = question.id
        for a, b in itertools.combinations(models, 2):
            if qid not in answers[a] or qid not in answers[b]:
                summary.ignored += 1
                continue
            payload = pair_payload(
                question.turns, answers[a][qid], answers[b][qid], a, b, category=question.category
            )
            yield Record(row.line, pair_id(qid, a, b), qid, payload)
