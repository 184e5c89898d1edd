"""FastChat's MT-Bench human judgments: each annotator's preference as a vote on the pair item.

The ``human`` split of ``lmsys/mt_bench_human_judgments`` (FastChat llm_judge's
``human_judgments.json``): one row per annotator, model pair and turn, several annotators per
pair. Each row becomes a ``vote`` label event by that annotator, so resolution, queue agreement
and the judges-against-people figures read them as they read votes cast in a queue.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.json_array import open_json_array
from app.ingest.judge_files import input_files
from app.ingest.mtbench import pair_id, pair_payload
from app.ingest.readers import Row, Table, open_table
from app.ingest.records import ImportSummary, Record, SourceFields
from app.ingest.values import identifier
from app.ingest.writer import DEFAULT_CHUNK_ROWS, conflict, record_import, write_records
from app.services.evidence.benchmarks import bump_data_version, ensure_benchmark
from app.services.evidence.labels import VOTE
from app.tables import Benchmark, BenchmarkKind, Instance, LabelEvent, utcnow

__all__ = ["HUMAN_LABEL", "WINNERS", "import_mtbench_human"]

IMPORTER = "mtbench-human"
HUMAN_LABEL = "human"
FIELDS = (
    "question_id",
    "model_a",
    "model_b",
    "winner",
    "judge",
    "conversation_a",
    "conversation_b",
    "turn",
)
WINNERS = {"model_a": "A", "model_b": "B", "tie": "tie", "tie (bothbad)": "tie"}
"""The file's winners as the pair's identities (``tie (bothbad)``: a tie, as FastChat counts it)."""
TURNS = (1, 2)
HUMAN_FILES = ("*.jsonl", "*.json", "*.parquet")
SOURCE_FIELDS = SourceFields(
    external_id="question_id",
    group_key="question_id",
    payload={
        "prompt": "conversation_a",
        "response_a": "conversation_a",
        "response_b": "conversation_b",
        "model_a": "model_a",
        "model_b": "model_b",
        "turn": "turn",
        "turn1_prompt": "conversation_a",
        "turn1_response_a": "conversation_a",
        "turn1_response_b": "conversation_b",
    },
)
NOTES = {
    "description": "MT-Bench pairs; turn 2 is an item of its own with the turn-1 exchange; "
    "group = question.",
    "source": "FastChat llm_judge (github.com/lm-sys/FastChat); human judgments: "
    "huggingface.co/datasets/lmsys/mt_bench_human_judgments",
    "licence": "CC-BY-4.0 (human judgments); the judged answers keep their own terms",
}


def import_mtbench_human(
    session: Session,
    paths: Sequence[str | os.PathLike[str]],
    *,
    benchmark: str = "mt-bench",
    label: str = HUMAN_LABEL,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportSummary:
    """Import MT-Bench human judgments as one vote per annotator, pair and turn.

    A row ``{question_id, model_a, model_b, winner, judge, conversation_a, conversation_b,
    turn}`` is annotator ``judge``'s vote on label set ``label`` of the item
    ``<qid>:<model A>|<model B>`` (``:turn2`` for turn 2): ``A`` for ``model_a``, ``B`` for
    ``model_b``, ``tie`` for ``tie`` and ``tie (bothbad)`` (the reason keeps the latter).
    The item and its payload are those of :mod:`app.ingest.mtbench_judgments` (texts read from
    the conversations), so judges imported from FastChat's pair files score the same items.
    Annotators see the two models in either order: a pair's items take the orientation the
    benchmark already holds (else the first row's) and a vote on the swapped pair is mirrored.

    Parameters
    ----------
    session
        The caller's session (one transaction: bad input changes nothing).
    paths
        ``.jsonl``, ``.json`` (FastChat's ``human_judgments.json``: one array) or ``.parquet``
        (the dataset's files) files, or folders of them.
    benchmark
        The pairwise benchmark (created when missing).
    label
        The label set the votes are cast on.
    chunk_size
        Records per bulk write.

    Returns
    -------
    ImportSummary
        ``labels_added``/``labels_skipped`` count votes written and votes already stored.

    Raises
    ------
    InvalidInput
        ``file:line: field: reason`` for a missing field, a winner or turn outside the
        vocabulary, a conversation that is not alternating user and assistant messages (or is
        too short for its turn, or shows the two models different questions), rows of one item
        showing different texts, an annotator voting twice on an item with different winners,
        or a model judge's row (``judge`` a list: import those with ``mtbench-judgments``).
    Conflict
        An item whose stored texts differ, or an annotator's stored vote the file contradicts.

    """
    if not label.strip():
        raise InvalidInput("the label set needs a name", field="label")
    bench = ensure_benchmark(session, benchmark, BenchmarkKind.pairwise, **NOTES)
    summary = ImportSummary()
    for path in input_files(paths, HUMAN_FILES):
        _import_file(session, bench, path, label, chunk_size, summary)
        summary.files.append(os.fspath(path))
    summary.benchmark = bench.name
    if summary.instances_added or summary.labels_added:
        # Votes are review events: the original labels and the evidence stay as they were,
        # unless the file brought new items.
        review = summary.instances_added == 0
        summary.data_version = bump_data_version(session, bench, review=review)
    else:
        summary.data_version = bench.data_version
    return summary


@contextmanager
def _open(path: Path) -> Iterator[Table]:
    if path.suffix.lower() == ".json":
        with open_json_array(path, required=FIELDS) as table:
            yield table
    else:
        with open_table(path, required=FIELDS) as table:
            yield table


@dataclass
class _Vote:
    """One annotator's vote on one item, and the row it came from."""

    value: str
    winner: str
    line: int


@dataclass
class _Item:
    """One pair item: its record and every annotator's vote on it."""

    record: Record
    votes: dict[str, _Vote] = field(default_factory=dict)


@dataclass
class _File:
    """The rows of one file grouped by item (a pair's rows may be far apart in the file)."""

    session: Session
    bench: Benchmark
    name: str
    items: dict[str, _Item] = field(default_factory=dict)
    # (question id, unordered pair) -> (model A, model B) of the pair's items.
    orientation: dict[tuple[str, frozenset[str]], tuple[str, str]] = field(default_factory=dict)

    def add(self, row: Row) -> None:
        qid = row.convert("question_id", identifier)
        first, second = row.text("model_a"), row.text("model_b")
        if first == second:
            raise row.error("model_b", f"the same model as model_a ({first!r})")
        turn = row.require("turn")
        if isinstance(turn, bool) or turn not in TURNS:
            raise row.error("turn", f"expected 1 or 2, got {turn!r}")
        winner = row.require("winner")
        if not isinstance(winner, str) or winner not in WINNERS:
            raise row.error("winner", f"expected one of {', '.join(WINNERS)}, got {winner!r}")
        author = _annotator(row)
        prompts, answers_first = _conversation(row, "conversation_a", turn)
        prompts_b, answers_second = _conversation(row, "conversation_b", turn)
        if prompts_b[:turn] != prompts[:turn]:
            raise row.error("conversation_b", "shows other user turns than conversation_a")
        a, b = self._oriented(qid, first, second)
        forward = (a, b) == (first, second)
        answers_a, answers_b = (
            (answers_first, answers_second) if forward else (answers_second, answers_first)
        )
        value = WINNERS[winner]
        if not forward and value != "tie":
            value = "B" if value == "A" else "A"
        payload = pair_payload(prompts, answers_a, answers_b, a, b, turn)
        external_id = pair_id(qid, a, b, turn)
        item = self.items.get(external_id)
        if item is None:
            item = self.items[external_id] = _Item(Record(row.line, external_id, qid, payload))
        elif item.record.payload != payload:
            raise row.error(
                "conversation_a",
                f"shows other texts of {external_id!r} than line {item.record.line}",
            )
        seen = item.votes.get(author)
        if seen is not None and seen.value != value:
            raise row.error(
                "winner",
                f"{author!r} voted on {external_id!r} on line {seen.line} too, with another "
                f"winner ({seen.winner!r}); one annotator holds one vote per item",
            )
        if seen is None:
            item.votes[author] = _Vote(value, winner, row.line)

    def _oriented(self, qid: str, first: str, second: str) -> tuple[str, str]:
        """The (A, B) models of this question's items of the pair ``{first, second}``.

        What the benchmark holds for the question (either turn) decides, else the first row.
        """
        key = (qid, frozenset((first, second)))
        if key not in self.orientation:
            held = self._held(qid, first, second)
            self.orientation[key] = held or (first, second)
        return self.orientation[key]

    def _held(self, qid: str, first: str, second: str) -> tuple[str, str] | None:
        for a, b in ((first, second), (second, first)):
            ids = [pair_id(qid, a, b, turn) for turn in TURNS]
            q = select(func.count()).where(
                Instance.benchmark_id == self.bench.id, Instance.external_id.in_(ids)
            )
            if self.session.scalar(q):
                return a, b
        return None


def _annotator(row: Row) -> str:
    value = row.require("judge")
    if isinstance(value, list):
        raise row.error(
            "judge",
            f"a model judge's row ({value!r}): import FastChat's pair judgments with "
            "`appellate import mtbench-judgments`",
        )
    if not isinstance(value, str) or not value.strip():
        raise row.error("judge", f"expected the annotator's name, got {value!r}")
    return value


def _conversation(row: Row, name: str, turn: int) -> tuple[list[str], list[str]]:
    """The user's turns and the model's answers of ``row[name]``, up to ``turn`` at least."""
    messages = row.require(name)
    if not isinstance(messages, list):
        raise row.error(name, f"expected a list of messages, got {type(messages).__name__}")
    prompts: list[str] = []
    answers: list[str] = []
    for i, message in enumerate(messages):
        role = "user" if i % 2 == 0 else "assistant"
        if (
            not isinstance(message, dict)
            or message.get("role") != role
            or not isinstance(message.get("content"), str)
        ):
            raise row.error(
                f"{name}[{i}]",
                f"expected {{'role': {role!r}, 'content': text}} (user and assistant "
                f"messages alternate), got {message!r}",
            )
        (prompts if role == "user" else answers).append(message["content"])
    if len(answers) < turn:
        raise row.error(name, f"turn {turn} needs {2 * turn} messages, got {len(messages)}")
    return prompts, answers


def _import_file(
    session: Session,
    bench: Benchmark,
    path: Path,
    label: str,
    chunk_size: int,
    summary: ImportSummary,
) -> None:
    grouped = _File(session, bench, os.fspath(path))
    with _open(path) as table:
        for row in table:
            grouped.add(row)
        name = table.name
    records = [item.record for item in grouped.items.values()]
    _keep_stored_category(session, bench, records)
    counts = write_records(session, bench, name, records, SOURCE_FIELDS, chunk_size=chunk_size)
    added, present = _write_votes(session, bench, name, label, grouped.items)
    counts.labels_added += added
    counts.labels_skipped += present
    record_import(session, bench, IMPORTER, path, counts, extra={"label": label})
    summary.add(counts)


def _keep_stored_category(session: Session, bench: Benchmark, records: list[Record]) -> None:
    """Give records of stored items the item's ``category``: the file has none to compare.

    Items imported with FastChat's question file carry the question's category; the human
    judgments do not name it, which is no difference in the texts.
    """
    ids = [r.external_id for r in records]
    q = select(Instance.external_id, Instance.payload).where(
        Instance.benchmark_id == bench.id, Instance.external_id.in_(ids)
    )
    stored = {ext: payload for ext, payload in session.execute(q)}
    for record in records:
        category = (stored.get(record.external_id) or {}).get("category")
        if category is not None and "category" not in record.payload:
            record.payload = {**record.payload, "category": category}


def _write_votes(
    session: Session, bench: Benchmark, file: str, label: str, items: dict[str, _Item]
) -> tuple[int, int]:
    """Append each annotator's vote unless it is stored; (added, already present)."""
    q = select(Instance.external_id, Instance.id).where(
        Instance.benchmark_id == bench.id, Instance.external_id.in_(list(items))
    )
    ids = {ext: iid for ext, iid in session.execute(q)}
    latest = (
        select(func.max(LabelEvent.id))
        .where(
            LabelEvent.instance_id.in_(list(ids.values())),
            LabelEvent.label_name == label,
            LabelEvent.source == VOTE,
        )
        .group_by(LabelEvent.instance_id, LabelEvent.author)
    )
    stored = {
        (iid, author): value
        for iid, author, value in session.execute(
            select(LabelEvent.instance_id, LabelEvent.author, LabelEvent.value).where(
                LabelEvent.id.in_(latest)
            )
        )
    }
    now = utcnow()
    rows: list[dict[str, Any]] = []
    present = 0
    for ext, item in items.items():
        iid = ids[ext]
        for author, vote in item.votes.items():
            old = stored.get((iid, author))
            if old == vote.value:
                present += 1
                continue
            if old is not None:
                raise conflict(
                    file,
                    vote.line,
                    "winner",
                    f"{author!r}'s vote on {ext!r} is stored as {old!r}, the file says "
                    f"{vote.value!r}",
                )
            rows.append(
                {
                    "instance_id": iid,
                    "label_name": label,
                    "value": vote.value,
                    "source": VOTE,
                    "author": author,
                    "reason": f"imported from {Path(file).name}: {vote.winner}",
                    "tags": [],
                    "created_at": now,
                }
            )
    if rows:
        session.execute(insert(LabelEvent.__table__), rows)
    return len(rows), present
