"""Small seeded benchmarks for web tests (pairwise, statement, response), built through the ORM."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.benchmarks import bump_data_version
from app.services.evidence.labels import append_label
from app.tables import Benchmark, Detector, Instance, Judgment, Score

PAIRWISE = "jb-mini"
STATEMENTS = "truth-mini"
RESPONSES = "lies-mini"
JUDGE = "arena_hard/o1-mini-2024-09-12"
JUDGE_2 = "arena_hard/gpt-4o-mini"
RM_1 = "reward_model/Skywork_Skywork-Reward-Gemma-2-27B"
RM_2 = "reward_model/internlm_internlm2-7b-reward"
PROBE = "probe/truth-layer12"
FLIP = f"flip:{JUDGE}"

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
RAW_SCRIPT = "<script>alert(3)</script>"
NEEDLE = "zebra-crossing"


@dataclass(frozen=True)
class Pair:
    """One pairwise instance of the seed, with what the tests expect of it."""

    external_id: str
    source: str
    reference: list[str]
    ab: str | None = None
    ba: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    prompt: str = "Which answer is right?"
    response_a: str = "Answer A."
    response_b: str = "Answer B."

    @property
    def flip(self) -> str | None:
        """The flip label the importer would derive."""
        if self.ab is None or self.ba is None or "invalid" in (self.ab, self.ba):
            return None
        return "1" if self.ab != self.ba else "0"


PAIRS = [
    Pair("pair/001:a|b", "mmlu-pro-law", ["A"], "A", "A", {RM_1: 2.5, RM_2: -0.25}),
    Pair("pair/002", "livebench-math", ["B"], "A", "B", {RM_1: -1.0, RM_2: 0.75}),
    Pair(
        "pair-003-xss",
        "livebench-math",
        ["A"],
        "B",
        "invalid",
        {RM_1: 0.5},
        prompt="Compare <b>bold</b> & 'quotes' \"here\"",
        response_a=f"Try this: {SCRIPT}\n\n    indented line",
        response_b=f"Or this: {IMG}",
    ),
    Pair("pair-004", "mmlu-pro-law", ["A", "B"], "B", "B", {RM_1: 1.5, RM_2: 0.1}),
    Pair(
        "pair-005",
        "livecodebench",
        ["B"],
        "tie",
        "A",
        {RM_1: -2.0, RM_2: -1.0},
        response_b=f"The answer mentions a {NEEDLE} and café crème.",
    ),
    Pair("q?x#y%z", "mmlu-pro-law", ["A"]),
]

STATEMENT_ROWS = [
    ("cities-0001", "The city of Paris is in France.", "cities", "1", 0.93),
    ("cities-0002", "The city of Lyon is in Japan.", "cities", "0", 0.12),
    ("sp-en-0001", "The Spanish word 'perro' means 'dog'.", "translations", "1", 0.81),
    ("sp-en-0002", "The Spanish word 'gato' means 'house'.", "translations", "0", 0.64),
]

RESPONSE_ROWS = [
    {
        "external_id": "flat-earth/001",
        "system_prompt": "You are a committed flat-earther.",
        "question": "What shape is the Earth?",
        "response": "The Earth is flat, obviously.",
        "persona": "flat-earther",
        "condition": "on-policy",
        "truth": "0",
    },
    {
        "external_id": "default/001",
        "system_prompt": "You are a helpful assistant.",
        "question": "What shape is the Earth?",
        "response": "The Earth is an oblate spheroid.",
        "persona": "assistant",
        "condition": "on-policy",
        "truth": "1",
    },
]


@dataclass(frozen=True)
class Seeded:
    """Names of what :func:`seed_benchmarks` created."""

    pairwise: str = PAIRWISE
    statements: str = STATEMENTS
    responses: str = RESPONSES


def _detector(session: Session, name: str, kind: str) -> Detector:
    det = Detector(name=name, kind=kind, details={})
    session.add(det)
    session.flush()
    return det


def _judgment(inst: Instance, judge: Detector, order: str, choice: str) -> Judgment:
    raw = f"Reasoning... {RAW_SCRIPT} CONFIDENCE: 80\nVERDICT: [[{choice}]]"
    return Judgment(
        instance_id=inst.id,
        detector_id=judge.id,
        order=order,
        raw_output=raw,
        choice=choice,
        confidence=80.0 if choice != "invalid" else None,
        verdict_logits={"A": 1.25, "B": -0.5} if choice != "invalid" else None,
        mode="imported",
        details={},
    )


def seed_benchmarks(factory: sessionmaker[Session]) -> Seeded:
    """Insert the three small benchmarks (pairwise, statement, response) in one transaction."""
    with transaction(factory) as session:
        judge = _detector(session, JUDGE, "judge")
        judge_2 = _detector(session, JUDGE_2, "judge")
        rms = {
            RM_1: _detector(session, RM_1, "reward_model"),
            RM_2: _detector(session, RM_2, "reward_model"),
        }
        probe = _detector(session, PROBE, "probe")

        bench = Benchmark(
            name=PAIRWISE,
            kind="pairwise",
            description="JudgeBench sample <i>not italic</i>",
            source="JudgeBench",
            licence="MIT",
            data_version=1,
        )
        session.add(bench)
        session.flush()
        for pair in PAIRS:
            payload: dict[str, Any] = {
                "prompt": pair.prompt,
                "response_a": pair.response_a,
                "response_b": pair.response_b,
                "source": pair.source,
                "response_model": "gpt-4o-2024-05-13",
            }
            inst = Instance(
                benchmark_id=bench.id,
                external_id=pair.external_id,
                group_key=f"q-{pair.source}",
                payload=payload,
            )
            session.add(inst)
            session.flush()
            for k, value in enumerate(pair.reference):
                append_label(
                    session,
                    inst.id,
                    "reference",
                    value,
                    source="import" if k == 0 else "reviewer",
                    author="" if k == 0 else "ann <b>",
                    reason="" if k == 0 else "key was wrong <script>alert(4)</script>",
                )
            if pair.ab is not None and pair.ba is not None:
                session.add(_judgment(inst, judge, "AB", pair.ab))
                session.add(_judgment(inst, judge, "BA", pair.ba))
            if pair.flip is not None:
                append_label(session, inst.id, FLIP, pair.flip, source="derived")
            for name, score in pair.scores.items():
                session.add(
                    Score(
                        detector_id=rms[name].id,
                        instance_id=inst.id,
                        score=score,
                        details={"scores": [score, 0.0]},
                    )
                )
        # A second judge with only an AB call on the first pair: no flip label set.
        first = session.query(Instance).filter_by(external_id=PAIRS[0].external_id).one()
        session.add(_judgment(first, judge_2, "AB", "B"))

        statements = Benchmark(name=STATEMENTS, kind="statement", source="truth", data_version=1)
        session.add(statements)
        session.flush()
        for ext, text, source, truth, score in STATEMENT_ROWS:
            inst = Instance(
                benchmark_id=statements.id,
                external_id=ext,
                group_key=ext,
                payload={"statement": text, "source": source},
            )
            session.add(inst)
            session.flush()
            append_label(session, inst.id, "truth", truth, source="import")
            session.add(
                Score(
                    detector_id=probe.id,
                    instance_id=inst.id,
                    score=score,
                    details={"layer": 12, "fold": 3},
                )
            )

        responses = Benchmark(name=RESPONSES, kind="response", source="role-play", data_version=1)
        session.add(responses)
        session.flush()
        for row in RESPONSE_ROWS:
            payload = {
                k: row[k] for k in ("system_prompt", "question", "response", "persona", "condition")
            }
            inst = Instance(
                benchmark_id=responses.id,
                external_id=row["external_id"],
                group_key=row["question"],
                payload=payload,
            )
            session.add(inst)
            session.flush()
            append_label(session, inst.id, "truth", row["truth"], source="import")
    return Seeded()


def bump_version(factory: sessionmaker[Session], name: str) -> None:
    """Mark a benchmark changed, as every writer does after touching its data."""
    with transaction(factory) as session:
        bench = session.query(Benchmark).filter_by(name=name).one()
        # Both versions: a write to the evidence bumps the evidence version too.
        bump_data_version(session, bench)
