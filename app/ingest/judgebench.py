"""JudgeBench pairs and published judge / reward-model outputs (both presentation orders)."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.ingest.finalize import finalize_import
from app.ingest.readers import Row, open_table
from app.ingest.records import ImportSummary, JudgmentIn, Record, ScoreIn, SourceFields
from app.ingest.values import identifier
from app.ingest.writer import DEFAULT_CHUNK_ROWS, record_import, write_records
from app.services.evidence.benchmarks import ensure_benchmark
from app.services.evidence.detectors import ensure_detector
from app.services.evidence.judge_scores import sigmoid
from app.tables import Benchmark, BenchmarkKind, Choice, Order

PAIR_FIELDS = (
    "pair_id",
    "original_id",
    "source",
    "question",
    "response_model",
    "response_A",
    "response_B",
    "label",
)
# payload field -> JudgeBench field
PAYLOAD_FIELDS = {
    "prompt": "question",
    "response_a": "response_A",
    "response_b": "response_B",
    "source": "source",
    "response_model": "response_model",
}
REFERENCE_LABEL = "reference"
QUESTION_GROUP_PREFIX = "question:"
REFERENCE = {"A>B": "A", "B>A": "B"}
# A decision names slots; the BA call shows response B in slot A, so its decision is mirrored.
IDENTITY = {
    Order.AB: {"A>B": Choice.A, "B>A": Choice.B, "A=B": Choice.tie, None: Choice.invalid},
    Order.BA: {"A>B": Choice.B, "B>A": Choice.A, "A=B": Choice.tie, None: Choice.invalid},
}
REWARD_MODEL = "reward_model"
FIELDS = SourceFields(
    external_id="pair_id",
    group_key="original_id",
    payload=PAYLOAD_FIELDS,
    labels={REFERENCE_LABEL: "label"},
)
NOTES = {
    "description": "Hard response pairs with an objectively correct response (label set "
    "'reference'); group = original question id, slice = source.",
    "source": "JudgeBench, github.com/ScalerLab/JudgeBench (arXiv 2410.12784)",
    "licence": "MIT",
}


def import_judgebench(
    session: Session,
    pairs_path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] = (),
    outputs: Sequence[str | os.PathLike[str]] = (),
    benchmark: str = "judgebench",
    *,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> ImportSummary:
    """Import JudgeBench pair files and judge-output files into a pairwise benchmark.

    Pairs: external id = ``pair_id``, group = ``original_id`` as text, or, where it is null (the
    LiveBench and LiveCodeBench pairs), ``question:`` + the first 16 hex digits of the SHA-256
    of the question, so that both response models' pairs of one question share a group;
    payload = ``{prompt: question, response_a, response_b, source, response_model}``
    (``source`` is the slice); label set ``reference`` = ``"A"``/``"B"`` from ``"A>B"``/``"B>A"``.

    Outputs (``...,judge_name=J,judge_model=M.jsonl``): detector ``J/M`` (kind ``reward_model``
    when J is ``reward_model``, else ``judge``; without those keys in the file name, the row's
    ``judge_name`` and the judgment's ``judge_model`` are used). ``judgments[0]`` is stored as
    the AB judgment and ``judgments[1]`` as BA with its slot decision mirrored to an identity
    (``A=B`` = tie, null = invalid); ``raw_output`` = the judge's response, ``details`` = the
    slot decision and the rest of the judgment (prompt, judge_model, reward ``scores``).
    A pair of an outputs file that is not in the benchmark yet is imported from the outputs row
    itself (it carries the same pair fields); one that is present must match it exactly.

    Reward models also get a score for "A is better": with ``r_A``, ``r_B`` the rewards of
    response identities A and B in one order, ``p = sigmoid(r_A - r_B)`` is the Bradley-Terry
    probability such models are trained to express; the score is the mean of ``p`` over the
    AB and BA orders (averaging cancels position bias), in [0, 1]. Per-order probabilities and
    rewards are kept in the score's details.

    Flip labels ``flip:<detector>`` and the judges' scores (P(A is better) from both orders, see
    :mod:`app.services.evidence.judge_scores`) are recomputed for the imported judges afterwards;
    reward models get neither.

    Parameters
    ----------
    session
        The caller's session; flushed, never committed.
    pairs_path
        One pairs file or a sequence of them (may be empty when ``outputs`` are given).
    outputs
        Judge-output files.
    benchmark
        Target benchmark name (kind ``pairwise``).
    chunk_size
        Rows per bulk write.

    Returns
    -------
    ImportSummary
        Counts summed over all files, with the flip label events appended.

    Raises
    ------
    InvalidInput
        ``file:line: field: reason`` for malformed JSON, a missing field, a label or decision
        outside the vocabulary, a duplicate pair id within a file, invalid UTF-8 or an empty file.
    Conflict
        When a pair, label, judgment or score contradicts what is stored.

    """
    pairs = [pairs_path] if isinstance(pairs_path, str | os.PathLike) else list(pairs_path)
    target = ensure_benchmark(session, benchmark, BenchmarkKind.pairwise, **NOTES)
    summary = ImportSummary()
    for path in pairs:
        _import_file(session, target, path, summary, None, chunk_size)
    judges: list[int] = []
    for path in outputs:
        judge = _JudgeFile.from_name(path)
        _import_file(session, target, path, summary, judge, chunk_size)
        if judge.detector_id is not None:
            judges.append(judge.detector_id)
    return finalize_import(session, target, summary, judges=judges)


def _import_file(
    session: Session,
    target: Benchmark,
    path: str | os.PathLike[str],
    summary: ImportSummary,
    judge: _JudgeFile | None,
    chunk_size: int,
) -> None:
    required = PAIR_FIELDS if judge is None else (*PAIR_FIELDS, "judgments")
    with open_table(path, required=required, fmt="jsonl") as table:
        records: Iterator[Record] = (
            _pair_record(row) if judge is None else judge.record(session, row) for row in table
        )
        counts = write_records(session, target, table.name, records, FIELDS, chunk_size=chunk_size)
    extra = {"detector": judge.name} if judge is not None and judge.name else None
    record_import(session, target, "judgebench", path, counts, extra=extra)
    summary.add(counts)
    summary.files.append(os.fspath(path))


def _pair_record(row: Row) -> Record:
    row.text("pair_id")
    external_id = row.convert("pair_id", identifier)
    payload = {key: row.text(source) for key, source in PAYLOAD_FIELDS.items()}
    if row.require("original_id") is None:
        # LiveBench and LiveCodeBench pairs have no original_id; the question text still ties
        # the variants of one question together (one group, one fold).
        digest = hashlib.sha256(payload["prompt"].encode("utf-8")).hexdigest()[:16]
        group = f"{QUESTION_GROUP_PREFIX}{digest}"
    else:
        # original_id is an integer in some files and a string in others: always store text.
        group = row.convert("original_id", identifier)
    label = row.require("label")
    if not isinstance(label, str) or label not in REFERENCE:
        raise row.error("label", f"expected 'A>B' or 'B>A', got {label!r}")
    return Record(row.line, external_id, group, payload, {REFERENCE_LABEL: REFERENCE[label]})


@dataclass
class _JudgeFile:
    """One outputs file: its judge, known from the file name or from its first row."""

    path: str
    judge_name: str | None
    judge_model: str | None
    detector_id: int | None = None
    name: str | None = None

    @classmethod
    def from_name(cls, path: str | os.PathLike[str]) -> _JudgeFile:
        keys = dict(part.split("=", 1) for part in Path(path).stem.split(",") if "=" in part)
        return cls(os.fspath(path), keys.get("judge_name"), keys.get("judge_model"))

    @property
    def is_reward_model(self) -> bool:
        return self.judge_name == REWARD_MODEL

    def _ensure_detector(self, session: Session, row: Row, judgments: list[Any]) -> int:
        if self.detector_id is not None:
            return self.detector_id
        if self.judge_name is None:
            self.judge_name = row.text("judge_name")
        first = judgments[0].get("judgment") if isinstance(judgments[0], dict) else None
        row_model = first.get("judge_model") if isinstance(first, dict) else None
        if self.judge_model is None:
            if not isinstance(row_model, str) or not row_model:
                raise row.error(
                    "judgments[0].judgment.judge_model",
                    "judge model unknown: not in the file name (judge_model=...) nor in the row",
                )
            # File names write "org/model" as "org_model"; keep names path-safe the same way.
            self.judge_model = row_model.replace("/", "_")
        self.name = f"{self.judge_name}/{self.judge_model}"
        detector = ensure_detector(
            session,
            self.name,
            "reward_model" if self.is_reward_model else "judge",
            details={
                "judge_name": self.judge_name,
                "judge_model": row_model or self.judge_model,
                "imported_from": Path(self.path).name,
            },
        )
        self.detector_id = detector.id
        return detector.id

    def record(self, session: Session, row: Row) -> Record:
        """The pair of ``row`` with its two judgments and, for reward models, a score."""
        record = _pair_record(row)
        judgments = row.require("judgments")
        if not isinstance(judgments, list) or len(judgments) != 2:
            raise row.error("judgments", "expected a list of two judgments (AB, then BA)")
        detector_id = self._ensure_detector(session, row, judgments)
        if "judge_name" in row.data and row.data["judge_name"] != self.judge_name:
            raise row.error(
                "judge_name",
                f"{row.data['judge_name']!r} differs from the file's judge {self.judge_name!r}",
            )
        rewards: dict[str, list[float]] = {}
        for k, order in enumerate((Order.AB, Order.BA)):
            judgment, slot_rewards = self._judgment(row, k, order, judgments[k], detector_id)
            record.judgments.append(judgment)
            if slot_rewards is not None:
                # Slot rewards -> identity rewards [r_A, r_B]: BA shows B in slot A.
                rewards[order] = slot_rewards if order == Order.AB else slot_rewards[::-1]
        if self.is_reward_model and rewards:
            record.scores.append(_reward_score(detector_id, rewards))
        return record

    def _judgment(
        self, row: Row, k: int, order: Order, entry: Any, detector_id: int
    ) -> tuple[JudgmentIn, list[float] | None]:
        where = f"judgments[{k}]"
        if not isinstance(entry, dict):
            raise row.error(where, "expected an object with 'decision' and 'judgment'")
        if "decision" not in entry:
            raise row.error(f"{where}.decision", "missing field")
        decision = entry["decision"]
        if not (decision is None or isinstance(decision, str)) or decision not in IDENTITY[order]:
            raise row.error(
                f"{where}.decision", f"expected 'A>B', 'B>A', 'A=B' or null, got {decision!r}"
            )
        body = entry.get("judgment") or {}
        if not isinstance(body, dict):
            raise row.error(f"{where}.judgment", "expected an object")
        raw = body.get("response") or ""
        if not isinstance(raw, str):
            raise row.error(f"{where}.judgment.response", "expected a string")
        details = {"decision": decision, **{k2: v for k2, v in body.items() if k2 != "response"}}
        slot_rewards = None
        if self.is_reward_model and body.get("scores") is not None:
            scores = body["scores"]
            if not (
                isinstance(scores, list)
                and len(scores) == 2
                and all(
                    isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)
                    for s in scores
                )
            ):
                raise row.error(
                    f"{where}.judgment.scores", "expected [reward of slot A, reward of slot B]"
                )
            slot_rewards = [float(s) for s in scores]
        judgment = JudgmentIn(
            detector_id=detector_id,
            order=order.value,
            choice=IDENTITY[order][decision].value,
            raw_output=raw,
            details=details,
            field=where,
        )
        return judgment, slot_rewards


def _reward_score(detector_id: int, rewards: dict[str, list[float]]) -> ScoreIn:
    """P(A is better): mean over orders of sigmoid(r_A - r_B), rewards already per identity."""
    per_order = {order: sigmoid(r[0] - r[1]) for order, r in rewards.items()}
    details: dict[str, Any] = {
        "rule": "mean over orders of sigmoid(reward_A - reward_B)",
        **{f"p_{order.lower()}": p for order, p in per_order.items()},
        **{f"rewards_{order.lower()}": r for order, r in rewards.items()},
    }
    score = sum(per_order.values()) / len(per_order)
    return ScoreIn(detector_id, score, details, field="judgments[*].judgment.scores")
