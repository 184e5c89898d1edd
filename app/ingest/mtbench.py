"""MT-Bench as a pairwise benchmark: two models' first-turn answers to the same question."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

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
    answers = {m: _read_answers(Path(answers_dir) / f"{m}.jsonl") for m in chosen}
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


def _first_turn(row: Row, field: str) -> str:
    """``row[field][0]`` (or ``row["choices"][0]["turns"][0]``) as a string."""
    value = row.require(field)
    path = field
    if field == "choices":
        if not isinstance(value, list) or not value or not isinstance(value[0], dict):
            raise row.error("choices", "expected a non-empty list of objects")
        value, path = value[0].get("turns"), "choices[0].turns"
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise row.error(path, "expected a non-empty list of strings")
    return value[0]


def _read_answers(path: Path) -> dict[str, str]:
    """``{question id: first-turn answer}`` of one model's answer file."""
    out: dict[str, str] = {}
    first_line: dict[str, int] = {}
    with open_table(path, required=("question_id", "choices"), fmt="jsonl") as table:
        for row in table:
            qid = row.convert("question_id", identifier)
            if qid in out:
                raise row.error(
                    "question_id", f"duplicate id {qid!r} (also on line {first_line[qid]})"
                )
            out[qid] = _first_turn(row, "choices")
            first_line[qid] = row.line
    return out


def _pairs(
    rows: Iterable[Row],
    models: list[str],
    answers: dict[str, dict[str, str]],
    summary: ImportSummary,
) -> Iterator[Record]:
    for row in rows:
        qid = row.convert("question_id", identifier)
        prompt = _first_turn(row, "turns")
        category = row.text("category")
        for a, b in itertools.combinations(models, 2):
            if qid not in answers[a] or qid not in answers[b]:
                summary.ignored += 1
                continue
            payload = {
                "prompt": prompt,
                "response_a": answers[a][qid],
                "response_b": answers[b][qid],
                "category": category,
                "model_a": a,
                "model_b": b,
            }
            yield Record(row.line, f"{qid}:{a}|{b}", qid, payload)
