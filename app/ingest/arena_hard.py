"""Arena-Hard-Auto judgments: ``games[0]`` (baseline first) and ``games[1]`` (swapped) as AB/BA.

The five-level verdict gives the choice and its strength; flips follow at import.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.ingest.finalize import finalize_import
from app.ingest.judge_files import JudgeDetectors, input_files
from app.ingest.judge_prompts import ARENA_HARD
from app.ingest.readers import Row, open_table
from app.ingest.records import ImportSummary, JudgmentIn, Record, SourceFields
from app.ingest.values import identifier
from app.ingest.writer import DEFAULT_CHUNK_ROWS, record_import, write_records
from app.services.evidence.benchmarks import ensure_benchmark
from app.tables import BenchmarkKind, Choice, Order

__all__ = ["DEFAULT_BASELINE", "STRENGTH_CONFIDENCE", "import_arena_hard"]

IMPORTER = "arena-hard"
PROTOCOL = "arena_hard"
DEFAULT_BASELINE = "gpt-4-0314"
"""Arena-Hard-Auto v0.1's baseline; the judgment files do not name it."""
FIELDS = ("question_id", "model", "judge", "games")
GAME_COUNT = 2
# Slot verdict -> (slot chosen, strength); None: the verdict regex failed upstream.
VERDICTS: dict[str | None, tuple[str | None, str | None]] = {
    "A>>B": ("A", "strong"),
    "A>B": ("A", "weak"),
    "A=B": (None, "tie"),
    "B>A": ("B", "weak"),
    "B>>A": ("B", "strong"),
    None: (None, None),
}
STRENGTH_CONFIDENCE: dict[str | None, float | None] = {
    "strong": 100.0,
    "weak": 75.0,
    "tie": 50.0,
    None: None,
}
"""The verdict's strength on the 0-100 confidence scale: an ordinal reading, not a probability
(a tie is 50, indifference; ``>`` halfway to certain; ``>>`` certain)."""
SOURCE_FIELDS = SourceFields(
    external_id="question_id",
    group_key="question_id",
    payload={
        "prompt": "games[0].user_prompt",
        "response_a": "games[0].user_prompt",
        "response_b": "games[0].user_prompt",
        "model_a": "baseline",
        "model_b": "model",
    },
)
NOTES = {
    "description": "Arena-Hard-Auto questions: a model's answer (B) against the baseline's (A), "
    "judged in both orders (games[0]: baseline first; games[1]: swapped); group = question.",
    "source": "Arena-Hard-Auto model_judgment/<judge>/<model>.jsonl "
    "(github.com/lmarena/arena-hard-auto)",
    "licence": "Apache-2.0 (Arena-Hard-Auto); the judged answers keep their own terms",
}


def import_arena_hard(
    session: Session,
    paths: Sequence[str | os.PathLike[str]],
    *,
    baseline: str = DEFAULT_BASELINE,
    benchmark: str = "arena-hard",
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportSummary:
    """Import Arena-Hard-Auto judgment files, or folders of them (searched recursively).

    Instance ``<question_id>:<baseline>|<model>`` with ``model`` from the row (never the file
    name, which can differ), group = question id, payload ``{prompt, response_a (the
    baseline's answer), response_b (the model's), model_a, model_b}``, read back from the
    judge's prompt and checked to show the same texts, swapped, in both games. ``games[0]`` is
    the AB judgment, ``games[1]`` the BA one with its verdict mirrored; ``A=B`` is a tie, a null
    score an invalid judgment (the pair is not retained). Confidence = the verdict's strength
    (:data:`STRENGTH_CONFIDENCE`); raw output = the judgment text; details keep the game, the
    slot verdict as written and its strength. Detector ``arena_hard/<judge>`` (the row's
    ``judge``; a ``/`` becomes ``_``).

    Parameters
    ----------
    session
        The caller's session (one transaction: bad input changes nothing).
    paths
        Judgment files, or folders searched recursively for ``*.jsonl``.
    baseline
        The baseline model's name (the files do not say it).
    benchmark
        Target benchmark name (kind ``pairwise``).
    chunk_size
        Records per bulk write.

    Returns
    -------
    ImportSummary
        Counts summed over the files, with the flip labels derived.

    Raises
    ------
    InvalidInput
        ``file:line: field: reason`` for a missing field, games that are not two, a verdict
        outside the five levels, a judge prompt that is not Arena-Hard's or games that show
        different texts.
    Conflict
        When an item or judgment contradicts what is stored.

    """
    target = ensure_benchmark(session, benchmark, BenchmarkKind.pairwise, **NOTES)
    judges = JudgeDetectors(session, PROTOCOL, {"format": "arena-hard-auto", "baseline": baseline})
    summary = ImportSummary()
    for path in input_files(paths, "*.jsonl", recursive=True):
        with open_table(path, required=FIELDS, fmt="jsonl") as table:
            records = (_record(row, path, baseline, judges) for row in table)
            counts = write_records(
                session, target, table.name, records, SOURCE_FIELDS, chunk_size=chunk_size
            )
        record_import(session, target, IMPORTER, path, counts, extra={"baseline": baseline})
        summary.add(counts)
        summary.files.append(os.fspath(path))
    return finalize_import(session, target, summary, judges=judges.flip_judges)


def _game(row: Row, games: list[Any], k: int) -> dict[str, Any]:
    game = games[k]
    where = f"games[{k}]"
    if not isinstance(game, dict):
        raise row.error(where, "expected an object with user_prompt, judgment and score")
    for key in ("user_prompt", "judgment", "score"):
        if key not in game:
            raise row.error(f"{where}.{key}", "missing field")
        if key != "score" and not isinstance(game[key], str):
            raise row.error(f"{where}.{key}", "expected a string")
    return game


def _texts(row: Row, games: list[dict[str, Any]]) -> tuple[str, str, str]:
    """(question, baseline's answer, model's answer) from the judge's prompts of both games."""
    first = ARENA_HARD.parse(games[0]["user_prompt"])
    if first is None:
        raise row.error(
            "games[0].user_prompt",
            "does not follow Arena-Hard's judge prompt ('<|User Prompt|>' ... '<|The End of "
            "Assistant B's Answer|>'), so the question and answers cannot be read from it",
        )
    second = ARENA_HARD.parse(games[1]["user_prompt"])
    shown = (first["question_1"], first["answer_1"], first["answer_2"])
    if second is None or (second["question_1"], second["answer_2"], second["answer_1"]) != shown:
        raise row.error(
            "games[1].user_prompt",
            "does not show games[0]'s question and answers with the answers swapped",
        )
    return shown


def _record(row: Row, path: Path, baseline: str, judges: JudgeDetectors) -> Record:
    qid = row.convert("question_id", identifier)
    model = row.text("model")
    judge = row.text("judge")
    games = row.require("games")
    if not isinstance(games, list) or len(games) != GAME_COUNT:
        raise row.error("games", "expected a list of two games (baseline first, then swapped)")
    checked = [_game(row, games, k) for k in range(GAME_COUNT)]
    question, answer_baseline, answer_model = _texts(row, checked)
    payload = {
        "prompt": question,
        "response_a": answer_baseline,
        "response_b": answer_model,
        "model_a": baseline,
        "model_b": model,
    }
    record = Record(row.line, f"{qid}:{baseline}|{model}", qid, payload)
    detector = judges.id(judge, path)
    for k, order in enumerate((Order.AB, Order.BA)):
        score = checked[k]["score"]
        if not (score is None or isinstance(score, str)) or score not in VERDICTS:
            levels = ", ".join(v for v in VERDICTS if v is not None)
            raise row.error(f"games[{k}].score", f"expected one of {levels} or null, got {score!r}")
        slot, strength = VERDICTS[score]
        if score is None:
            choice = Choice.invalid
        elif slot is None:
            choice = Choice.tie
        else:
            # games[1] shows the model in slot A: its slots name the other identities.
            same = order == Order.AB
            choice = Choice.A if (slot == "A") == same else Choice.B
        record.judgments.append(
            JudgmentIn(
                detector_id=detector,
                order=order.value,
                choice=choice.value,
                raw_output=checked[k]["judgment"],
                details={"game": k + 1, "score": score, "strength": strength},
                confidence=STRENGTH_CONFIDENCE[strength],
                field=f"games[{k}].score",
            )
        )
    return record
