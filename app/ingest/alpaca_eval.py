"""AlpacaEval ``annotations.json``: one judgment per pair, shown in one random, unrecorded order.

Each becomes a one-order judgment marked ``single_order`` (the pairs to re-judge in both orders).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.ingest.finalize import finalize_import
from app.ingest.json_array import open_json_array
from app.ingest.judge_files import JudgeDetectors, input_files, number
from app.ingest.readers import Row
from app.ingest.records import ImportSummary, JudgmentIn, Record, ScoreIn, SourceFields
from app.ingest.writer import DEFAULT_CHUNK_ROWS, record_import, write_records
from app.services.evidence.benchmarks import ensure_benchmark
from app.tables import BenchmarkKind, Choice, Order

__all__ = ["SINGLE_ORDER", "import_alpaca_eval", "instruction_group"]

IMPORTER = "alpaca-eval"
PROTOCOL = "alpaca_eval"
FIELDS = (
    "instruction",
    "output_1",
    "generator_1",
    "dataset",
    "output_2",
    "generator_2",
    "annotator",
    "preference",
)
SINGLE_ORDER = "single_order"
"""The details key (True) of judgments, and of their detector, seen in one unknown order."""
PRESENTATION = "one order drawn at random by AlpacaEval, not recorded"
DRAW = 0.0
"""AlpacaEval's preference for a draw it did not send to the annotator (identical outputs)."""
TIE = 1.5
SOURCE_FIELDS = SourceFields(
    external_id="instruction",
    group_key="instruction",
    payload={
        "prompt": "instruction",
        "response_a": "output_1",
        "response_b": "output_2",
        "model_a": "generator_1",
        "model_b": "generator_2",
        "dataset": "dataset",
    },
)
NOTES = {
    "description": "AlpacaEval instructions: the baseline's output (A) against a model's (B), "
    "each judged once by an annotator in one randomised, unrecorded order; group = "
    "instruction, slice = dataset.",
    "source": "AlpacaEval results/<model>/<annotator>/annotations.json "
    "(github.com/tatsu-lab/alpaca_eval)",
    "licence": "AlpacaEval data: CC BY-NC 4.0 (code Apache-2.0)",
}


def instruction_group(dataset: str, instruction: str) -> str:
    """The group of an instruction: ``<dataset>:`` + 16 hex digits of its SHA-256.

    AlpacaEval items have no id; the instruction text (within its dataset) is what the files
    of different models share.
    """
    digest = hashlib.sha256(instruction.encode("utf-8")).hexdigest()[:16]
    return f"{dataset}:{digest}"


def import_alpaca_eval(
    session: Session,
    paths: Sequence[str | os.PathLike[str]],
    *,
    benchmark: str = "alpaca-eval",
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportSummary:
    """Import AlpacaEval ``annotations.json`` files, or folders searched for them.

    Instance ``<dataset>:<hash>:<generator_1>|<generator_2>`` (see :func:`instruction_group`),
    group = ``<dataset>:<hash>``, payload ``{prompt: instruction, response_a: output_1,
    response_b: output_2, model_a, model_b, dataset}`` (``dataset`` is the slice). One judgment
    per element, stored as order AB with ``details["single_order"] = True`` (its detector's
    details say the same): choice A below 1.5, B above, a tie at 1.5 or 0 (0 is AlpacaEval's
    draw of identical outputs), invalid for null. Score of the detector ``alpaca_eval/<annotator>``
    = P(output_1 preferred) = 2 - preference (0.5 for a draw), none for null. Details keep the
    preference as written, price and time per example, and the completion's text where the
    file has ``raw_completion`` (its log-probabilities are not kept).

    Parameters
    ----------
    session
        The caller's session (one transaction: bad input changes nothing).
    paths
        ``annotations.json`` files, or folders searched recursively for them.
    benchmark
        Target benchmark name (kind ``pairwise``).
    chunk_size
        Records per bulk write.

    Returns
    -------
    ImportSummary
        Counts summed over the files (no flips: one order only).

    Raises
    ------
    InvalidInput
        ``file:line: field: reason`` (the line an element starts on) for content that is no
        JSON array of objects, a missing field, a preference outside 0, [1, 2] and null.
    Conflict
        When an item, judgment or score contradicts what is stored.

    """
    target = ensure_benchmark(session, benchmark, BenchmarkKind.pairwise, **NOTES)
    judges = JudgeDetectors(
        session, PROTOCOL, {"format": "alpaca-eval", SINGLE_ORDER: True}, two_orders=False
    )
    summary = ImportSummary()
    for path in input_files(paths, "annotations.json", recursive=True):
        with open_json_array(path, required=FIELDS) as table:
            records = (_record(row, path, judges) for row in table)
            counts = write_records(
                session, target, table.name, records, SOURCE_FIELDS, chunk_size=chunk_size
            )
        record_import(session, target, IMPORTER, path, counts)
        summary.add(counts)
        summary.files.append(os.fspath(path))
    return finalize_import(session, target, summary, judges=judges.flip_judges)


def _choice(row: Row) -> tuple[Choice, float | None]:
    """The identity the preference names and P(output_1 preferred), None for no preference."""
    raw = row.require("preference")
    if raw is None:
        return Choice.invalid, None
    value = number(raw)
    if value is None or not (value == DRAW or 1.0 <= value <= 2.0):
        raise row.error(
            "preference",
            f"expected a number from 1 (output_1) to 2 (output_2), 0 or 1.5 (a draw) or "
            f"null, got {raw!r}",
        )
    if value in (DRAW, TIE):
        return Choice.tie, 0.5
    return (Choice.A if value < TIE else Choice.B), 2.0 - value


def _completion_text(row: Row) -> str:
    """The annotator's completion text, where ``raw_completion`` holds one."""
    raw = row.data.get("raw_completion")
    if isinstance(raw, str):
        return raw
    if isinstance(raw, dict) and isinstance(raw.get("text"), str):
        return str(raw["text"])
    return ""


def _record(row: Row, path: Path, judges: JudgeDetectors) -> Record:
    instruction = row.text("instruction")
    dataset = row.text("dataset")
    models = (row.text("generator_1"), row.text("generator_2"))
    payload = {
        "prompt": instruction,
        "response_a": row.text("output_1"),
        "response_b": row.text("output_2"),
        "model_a": models[0],
        "model_b": models[1],
        "dataset": dataset,
    }
    group = instruction_group(dataset, instruction)
    record = Record(row.line, f"{group}:{models[0]}|{models[1]}", group, payload)
    detector = judges.id(row.text("annotator"), path)
    choice, p_first = _choice(row)
    details: dict[str, Any] = {
        SINGLE_ORDER: True,
        "presentation": PRESENTATION,
        "preference": row.data["preference"],
    }
    for key in ("price_per_example", "time_per_example"):
        if (value := number(row.data.get(key))) is not None:
            details[key] = value
    record.judgments.append(
        JudgmentIn(
            detector_id=detector,
            order=Order.AB.value,
            choice=choice.value,
            raw_output=_completion_text(row),
            details=details,
            field="preference",
        )
    )
    if p_first is not None:
        rule = {
            "rule": "2 - preference: P(output_1 preferred)",
            "preference": details["preference"],
        }
        record.scores.append(ScoreIn(detector, p_first, rule, field="preference"))
    return record
