"""FastChat llm_judge MT-Bench judgments: pair games in both orders, and single-answer grades.

``g1``/``g2`` become AB/BA judgments (flips follow at import); 1-10 grades become scores.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.finalize import finalize_import
from app.ingest.judge_files import JudgeDetectors, input_files, number, text_list
from app.ingest.judge_prompts import FASTCHAT_PAIR, FASTCHAT_SINGLE, PromptTemplate
from app.ingest.mtbench import Question, pair_id, pair_payload, read_answers, read_questions
from app.ingest.readers import Row, open_table
from app.ingest.records import ImportSummary, JudgmentIn, Record, ScoreIn, SourceFields
from app.ingest.values import identifier
from app.ingest.writer import DEFAULT_CHUNK_ROWS, record_import, write_records
from app.services.evidence.benchmarks import ensure_benchmark
from app.tables import Benchmark, BenchmarkKind, Choice, Instance, Order

__all__ = ["import_mtbench_judgments", "single_id"]

IMPORTER = "mtbench-judgments"
PAIR_PROTOCOL = "fastchat_pair"
SINGLE_PROTOCOL = "fastchat_single"
PAIR_FIELDS = (
    "question_id",
    "model_1",
    "model_2",
    "g1_winner",
    "g2_winner",
    "judge",
    "g1_user_prompt",
    "g1_judgment",
    "g2_user_prompt",
    "g2_judgment",
    "turn",
)
SINGLE_FIELDS = ("question_id", "model", "judge", "user_prompt", "judgment", "score", "turn")
WINNERS = ("model_1", "model_2", "tie", "error")
UNPARSED_GRADE = -1
"""FastChat's score of a single-answer judgment whose ``[[rating]]`` it could not read."""
GRADES = (1.0, 10.0)
TURNS = (1, 2)
SINGLE_SUFFIX = "-single"
JUDGMENT_FILES = ("*_pair.jsonl", "*_single.jsonl")
"""What a folder is searched for (FastChat names its files ``<judge>_pair.jsonl`` and so on)."""
NOTES = {
    "description": "MT-Bench pairs judged by FastChat's llm_judge in both orders (g1: model_1 "
    "shown first, g2: model_2 first); turn 2 is an item of its own with the turn-1 exchange; "
    "group = question.",
    "source": "FastChat llm_judge model_judgment/*_pair.jsonl (github.com/lm-sys/FastChat)",
    "licence": "Apache-2.0 (FastChat); the judged answers keep their own terms",
}
SINGLE_NOTES = {
    "description": "MT-Bench answers graded 1-10 by FastChat's single-answer judge (detector "
    "scores); turn 2 is an item of its own with the turn-1 exchange; group = question.",
    "source": "FastChat llm_judge model_judgment/*_single.jsonl (github.com/lm-sys/FastChat)",
    "licence": NOTES["licence"],
}


def single_id(question_id: str, model: str, turn: int = 1) -> str:
    """The external id of one model's answer on one turn: ``<qid>:<model>[:turn2]``."""
    base = f"{question_id}:{model}"
    return base if turn == 1 else f"{base}:turn{turn}"


def import_mtbench_judgments(
    session: Session,
    paths: Sequence[str | os.PathLike[str]],
    *,
    questions: str | os.PathLike[str] | None = None,
    answers: str | os.PathLike[str] | None = None,
    benchmark: str = "mt-bench",
    single_benchmark: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_ROWS,
) -> list[ImportSummary]:
    """Import FastChat pair and single judgment files (or folders of them).

    A file is a pair file when its first row has ``g1_winner`` and a single file when it has
    ``score``. Pairs go into the pairwise benchmark ``benchmark``, single grades into the
    response benchmark ``single_benchmark`` (default ``<benchmark>-single``).

    Pairs: instance ``<qid>:<model A>|<model B>`` (``:turn2`` added for turn 2), A =
    ``model_1`` -- the id and payload of :func:`app.ingest.mtbench.import_mtbench`, so with the
    same ``questions`` and ``answers`` both importers make the same items. When the benchmark
    already holds the pair the other way round (``--models`` listed ``model_2`` first there),
    that item is used and the games are mirrored onto it (decided per model pair at its first
    row). The texts come from ``questions``/``answers`` when given (the payload then has the
    question's ``category``), else from the judge's prompt, read back through FastChat's
    templates and checked to show the same texts in both games. ``g1`` is the AB judgment when
    A is ``model_1``; winners become identities (``tie`` a tie, ``error`` invalid); details keep
    the game, the winner as written, the judge prompt's name and ``tstamp``. Detector
    ``fastchat_pair/<judge[0]>`` (a ``/`` in the name becomes ``_``).

    Single grades: instance ``<qid>:<model>`` (``:turn2``), payload ``{question, response,
    model[, category]}`` (turn 2: also ``turn``, ``turn1_question``, ``turn1_response``), score
    of detector ``fastchat_single/<judge[0]>`` = the 1-10 grade, details holding the judgment
    text. A grade of -1 is no score and is counted as ignored.

    Parameters
    ----------
    session
        The caller's session (one transaction: bad input changes nothing).
    paths
        Judgment files (any name: the first row decides), or folders searched recursively for
        ``*_pair.jsonl`` and ``*_single.jsonl``.
    questions, answers
        FastChat's ``question.jsonl`` and ``model_answer`` folder (both or neither).
    benchmark, single_benchmark
        Target benchmarks.
    chunk_size
        Records per bulk write.

    Returns
    -------
    list of ImportSummary
        One per benchmark written (pairs first), flips derived for the pair judges.

    Raises
    ------
    InvalidInput
        ``file:line: field: reason`` for a missing field, a winner, turn or grade outside the
        vocabulary, a judge prompt the texts cannot be read from (without ``questions`` and
        ``answers``), games showing different texts, a question or answer missing from the
        given files.
    Conflict
        When an item, judgment or score contradicts what is stored.

    """
    if (questions is None) != (answers is None):
        raise InvalidInput("give --questions and --answers together", field="questions")
    files = _AnswerFiles.open(questions, answers) if questions and answers else None
    importer = _Importer(session, files, benchmark, single_benchmark or benchmark + SINGLE_SUFFIX)
    for path in input_files(paths, JUDGMENT_FILES, recursive=True):
        importer.add_file(path, chunk_size)
    return importer.finish()


@dataclass
class _AnswerFiles:
    """FastChat's question file and answer folder: where the texts come from when given."""

    questions_path: Path
    answers_dir: Path
    questions: dict[str, Question]
    _answers: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @classmethod
    def open(
        cls, questions: str | os.PathLike[str], answers: str | os.PathLike[str]
    ) -> _AnswerFiles:
        folder = Path(answers)
        if not folder.is_dir():
            raise InvalidInput("no such folder", file=os.fspath(answers), field="answers")
        return cls(Path(questions), folder, read_questions(questions))

    def question(self, row: Row, qid: str, turn: int) -> Question:
        found = self.questions.get(qid)
        if found is None:
            raise row.error("question_id", f"no question {qid!r} in {self.questions_path}")
        if len(found.turns) < turn:
            raise row.error("turn", f"question {qid!r} has {len(found.turns)} turn(s)")
        return found

    def answers(self, row: Row, field: str, model: str, qid: str, turn: int) -> list[str]:
        if model not in self._answers:
            path = self.answers_dir / f"{model}.jsonl"
            if not path.is_file():
                raise row.error(field, f"no answer file {path} for model {model!r}")
            self._answers[model] = read_answers(path)
        found = self._answers[model].get(qid)
        if found is None or len(found) < turn:
            raise row.error(
                field, f"{model!r} has no turn-{turn} answer to question {qid!r} in its file"
            )
        return found


def _turn(row: Row) -> int:
    value = row.require("turn")
    if isinstance(value, bool) or value not in TURNS:
        raise row.error("turn", f"expected 1 or 2, got {value!r}")
    return int(value)


def _per_turn(values: Mapping[str, str], stem: str) -> list[str]:
    """A placeholder's value per turn: ``stem`` (one turn) or ``stem_1``, ``stem_2``."""
    if stem in values:
        return [values[stem]]
    return [values[f"{stem}_1"], values[f"{stem}_2"]]


def _read_prompt(
    row: Row, field: str, templates: Mapping[str, PromptTemplate], name: str, turn: int
) -> tuple[PromptTemplate, dict[str, str]]:
    """The template ``name`` (else any of ``templates``) ``row[field]`` follows, and its values."""
    text = row.text(field)
    tried = [templates[name]] if name in templates else list(templates.values())
    for template in tried:
        values = template.parse(text)
        if values is not None:
            if len(_per_turn(values, "question")) < turn:
                raise row.error(field, f"turn {turn} needs a two-turn prompt; {name!r} has one")
            return template, values
    which = (
        f"FastChat's {name!r} prompt"
        if name in templates
        else f"any FastChat prompt ({', '.join(templates)}; judge[1] is {name!r})"
    )
    raise row.error(
        field,
        f"does not follow {which}, so the question and answers cannot be read from it; "
        "give --questions and --answers to take them from FastChat's files",
    )


@dataclass
class _Texts:
    """What one item shows: the user's turns, both answers per turn, the question's category."""

    prompts: list[str]
    first: list[str]
    second: list[str]
    category: str | None = None


@dataclass
class _Importer:
    session: Session
    files: _AnswerFiles | None
    pair_name: str
    single_name: str
    pair_judges: JudgeDetectors = field(init=False)
    single_judges: JudgeDetectors = field(init=False)
    summaries: dict[str, ImportSummary] = field(default_factory=dict)
    targets: dict[str, Benchmark] = field(default_factory=dict)
    # (model_1, model_2) -> whether the item's A is model_1 (see _forward).
    _orientation: dict[tuple[str, str], bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pair_judges = JudgeDetectors(self.session, PAIR_PROTOCOL, {"format": "fastchat"})
        self.single_judges = JudgeDetectors(
            self.session, SINGLE_PROTOCOL, {"format": "fastchat", "scale": "1-10"}, False
        )

    def _target(self, kind: str) -> tuple[Benchmark, ImportSummary]:
        if kind not in self.targets:
            if kind == "pair":
                bench = ensure_benchmark(
                    self.session, self.pair_name, BenchmarkKind.pairwise, **NOTES
                )
            else:
                bench = ensure_benchmark(
                    self.session, self.single_name, BenchmarkKind.response, **SINGLE_NOTES
                )
            self.targets[kind] = bench
            self.summaries[kind] = ImportSummary()
        return self.targets[kind], self.summaries[kind]

    def add_file(self, path: Path, chunk_size: int) -> None:
        with open_table(path, fmt="jsonl") as table:
            rows = iter(table)
            first = next(rows)
            if "g1_winner" in first.data:
                kind, make, fields = "pair", self._pair_record, self._fields(pair=True)
            elif "score" in first.data:
                kind, make, fields = "single", self._single_record, self._fields(pair=False)
            else:
                raise first.error(
                    "g1_winner",
                    "neither a pair judgment (g1_winner) nor a single grade (score): "
                    "not a FastChat model_judgment file",
                )
            target, summary = self._target(kind)
            before = summary.ignored
            records = (make(row, path, summary) for row in itertools.chain([first], rows))
            counts = write_records(
                self.session, target, table.name, records, fields, chunk_size=chunk_size
            )
        extra: dict[str, Any] = {"kind": kind}
        if summary.ignored > before:
            extra["unparsed_grades"] = summary.ignored - before
        record_import(self.session, target, IMPORTER, path, counts, extra=extra)
        summary.add(counts)
        summary.files.append(os.fspath(path))

    def finish(self) -> list[ImportSummary]:
        out = []
        for kind in ("pair", "single"):
            if kind in self.targets:
                judges = self.pair_judges.flip_judges if kind == "pair" else []
                out.append(
                    finalize_import(
                        self.session, self.targets[kind], self.summaries[kind], judges=judges
                    )
                )
        return out

    def _fields(self, *, pair: bool) -> SourceFields:
        if self.files is not None:
            text = "choices[0].turns"
            prompt = "turns"
        else:
            text = prompt = "g1_user_prompt" if pair else "user_prompt"
        if pair:
            payload = {"prompt": prompt, "response_a": text, "response_b": text}
            payload |= {"model_a": "model_1", "model_b": "model_2", "category": "category"}
            payload |= {"turn": "turn", "turn1_prompt": prompt}
            payload |= {"turn1_response_a": text, "turn1_response_b": text}
        else:
            payload = {"question": prompt, "response": text, "model": "model", "turn": "turn"}
            payload |= {"category": "category", "turn1_question": prompt, "turn1_response": text}
        return SourceFields(external_id="question_id", group_key="question_id", payload=payload)

    def _forward(self, qid: str, model_1: str, model_2: str) -> bool:
        """Whether the item of this pair has A = model_1 (False: the benchmark holds it reversed).

        Decided at the pair's first row, from that question's items, so all its rows agree.
        """
        key = (model_1, model_2)
        if key not in self._orientation:
            bench, _ = self._target("pair")

            def held(external_id: str) -> bool:
                q = select(Instance.id).where(
                    Instance.benchmark_id == bench.id, Instance.external_id == external_id
                )
                return self.session.scalar(q) is not None

            reversed_only = (
                model_1 != model_2
                and held(pair_id(qid, model_2, model_1))
                and not held(pair_id(qid, model_1, model_2))
            )
            self._orientation[key] = not reversed_only
        return self._orientation[key]

    def _pair_texts(self, row: Row, qid: str, models: tuple[str, str], turn: int) -> _Texts:
        if self.files is not None:
            question = self.files.question(row, qid, turn)
            first, second = (
                self.files.answers(row, f"model_{k + 1}", m, qid, turn)
                for k, m in enumerate(models)
            )
            return _Texts(question.turns, first, second, question.category)
        name = text_list(row, "judge", 2)[1]
        template, g1 = _read_prompt(row, "g1_user_prompt", FASTCHAT_PAIR, name, turn)
        texts = _Texts(
            _per_turn(g1, "question"), _per_turn(g1, "answer_a"), _per_turn(g1, "answer_b")
        )
        g2 = template.parse(row.text("g2_user_prompt"))
        if g2 is None or (
            _per_turn(g2, "question"),
            _per_turn(g2, "answer_b"),
            _per_turn(g2, "answer_a"),
        ) != (texts.prompts, texts.first, texts.second):
            raise row.error(
                "g2_user_prompt",
                "does not show g1's question and answers with the answers swapped "
                f"(as FastChat's {template.name!r} prompt lays them out)",
            )
        return texts

    def _pair_record(self, row: Row, path: Path, summary: ImportSummary) -> Record:
        for name in PAIR_FIELDS:
            row.require(name)
        qid = row.convert("question_id", identifier)
        models = (row.text("model_1"), row.text("model_2"))
        judge, prompt_name = text_list(row, "judge", 2)
        turn = _turn(row)
        texts = self._pair_texts(row, qid, models, turn)
        forward = self._forward(qid, *models)
        a, b = models if forward else models[::-1]
        by_model = {"model_1": texts.first, "model_2": texts.second}
        answers_a, answers_b = (
            (by_model["model_1"], by_model["model_2"])
            if forward
            else (by_model["model_2"], by_model["model_1"])
        )
        payload = pair_payload(texts.prompts, answers_a, answers_b, a, b, turn, texts.category)
        record = Record(row.line, pair_id(qid, a, b, turn), qid, payload)
        detector = self.pair_judges.id(judge, path)
        identity = {
            "model_1": Choice.A if forward else Choice.B,
            "model_2": Choice.B if forward else Choice.A,
            "tie": Choice.tie,
            "error": Choice.invalid,
        }
        # g1 shows model_1 as Assistant A: the AB order when the item's A is model_1.
        orders = (Order.AB, Order.BA) if forward else (Order.BA, Order.AB)
        for game, order in zip(("g1", "g2"), orders, strict=True):
            winner = row.require(f"{game}_winner")
            if not isinstance(winner, str) or winner not in identity:
                raise row.error(
                    f"{game}_winner", f"expected one of {', '.join(WINNERS)}, got {winner!r}"
                )
            details: dict[str, Any] = {"game": game, "winner": winner, "prompt": prompt_name}
            if (tstamp := number(row.data.get("tstamp"))) is not None:
                details["tstamp"] = tstamp
            record.judgments.append(
                JudgmentIn(
                    detector_id=detector,
                    order=order.value,
                    choice=identity[winner].value,
                    raw_output=row.text(f"{game}_judgment"),
                    details=details,
                    field=f"{game}_winner",
                )
            )
        return record

    def _single_texts(self, row: Row, qid: str, model: str, turn: int) -> _Texts:
        if self.files is not None:
            question = self.files.question(row, qid, turn)
            answers = self.files.answers(row, "model", model, qid, turn)
            return _Texts(question.turns, answers, [], question.category)
        name = text_list(row, "judge", 2)[1]
        _, values = _read_prompt(row, "user_prompt", FASTCHAT_SINGLE, name, turn)
        return _Texts(_per_turn(values, "question"), _per_turn(values, "answer"), [])

    def _single_record(self, row: Row, path: Path, summary: ImportSummary) -> Record:
        for name in SINGLE_FIELDS:
            row.require(name)
        qid = row.convert("question_id", identifier)
        model = row.text("model")
        judge, prompt_name = text_list(row, "judge", 2)
        turn = _turn(row)
        grade = number(row.require("score"))
        if grade is None or not (grade == UNPARSED_GRADE or GRADES[0] <= grade <= GRADES[1]):
            raise row.error(
                "score",
                f"expected a grade from 1 to 10, or -1 (FastChat's mark of a grade it could "
                f"not read), got {row.data['score']!r}",
            )
        texts = self._single_texts(row, qid, model, turn)
        k = turn - 1
        payload: dict[str, Any] = {
            "question": texts.prompts[k],
            "response": texts.first[k],
            **({"category": texts.category} if texts.category is not None else {}),
            "model": model,
        }
        if turn > 1:
            payload |= {"turn": turn, "turn1_question": texts.prompts[0]}
            payload["turn1_response"] = texts.first[0]
        record = Record(row.line, single_id(qid, model, turn), qid, payload)
        detector = self.single_judges.id(judge, path)
        judgment = row.text("judgment")
        if grade == UNPARSED_GRADE:
            summary.ignored += 1
            return record
        details: dict[str, Any] = {"scale": "1-10", "prompt": prompt_name, "judgment": judgment}
        if (tstamp := number(row.data.get("tstamp"))) is not None:
            details["tstamp"] = tstamp
        record.scores.append(ScoreIn(detector, grade, details, field="score"))
        return record
