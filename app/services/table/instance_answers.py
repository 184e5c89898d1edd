"""What the models answered on one choice or answer item: votes per option, grades, probabilities.

The instance page of a choice item shows its options with the label marked and, per option, the
models that chose it; a model that gives option probabilities (a local model) is shown with
them. On an answer item each model's answer is shown with its grade against the reference.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.evidence.choices import option_letters
from app.services.evidence.graders import benchmark_grader
from app.tables import Benchmark, BenchmarkKind, Detector, Prediction

__all__ = ["ItemAnswers", "OptionVotes", "item_answers"]


class OptionVotes(BaseModel):
    """One option of a choice item: its text, whether it is the label, who chose it."""

    letter: str
    text: str
    is_label: bool
    models: list[str]
    share: float


class ModelAnswer(BaseModel):
    """One model's answer to the item, its grade and (for local models) option probabilities."""

    model: str
    answer: str
    correct: bool | None
    probabilities: dict[str, float] | None = None


class ItemAnswers(BaseModel):
    """The models' answers to one item.

    ``options`` is empty on answer items; ``off_options`` lists answers that name no option;
    ``answered`` counts the models that answered (probabilistic local models included).
    """

    label: str | None
    options: list[OptionVotes]
    off_options: list[ModelAnswer]
    answers: list[ModelAnswer]
    answered: int


def item_answers(
    session: Session, bench: Benchmark, instance_id: int, payload: dict[str, Any], label: str | None
) -> ItemAnswers | None:
    """The answers to one item of a choice or answer benchmark (``None`` on other kinds).

    Parameters
    ----------
    session
        An open session; nothing is written.
    bench
        The item's benchmark.
    instance_id, payload
        The item.
    label
        The current value of its ``reference`` label set (an option letter or answer text).

    """
    if bench.kind not in (BenchmarkKind.choice, BenchmarkKind.answer):
        return None
    rows = session.execute(
        select(Detector.name, Prediction.answer, Prediction.probabilities)
        .join(Detector, Detector.id == Prediction.detector_id)
        .where(Prediction.instance_id == instance_id)
        .order_by(Detector.name)
    ).all()
    grade = None if bench.kind == BenchmarkKind.choice else benchmark_grader(bench).grade
    answers = [
        ModelAnswer(
            model=name,
            answer=answer,
            correct=None
            if label is None
            else (answer == label if grade is None else grade(answer, label)),
            probabilities=probs or None,
        )
        for name, answer, probs in rows
    ]
    options: list[OptionVotes] = []
    off: list[ModelAnswer] = []
    if bench.kind == BenchmarkKind.choice:
        texts = [str(o) for o in payload.get("options") or []]
        letters = option_letters(len(texts))
        for letter, text in zip(letters, texts, strict=True):
            chose = [a.model for a in answers if a.answer == letter]
            options.append(
                OptionVotes(
                    letter=letter,
                    text=text,
                    is_label=letter == label,
                    models=chose,
                    share=len(chose) / len(answers) if answers else 0.0,
                )
            )
        off = [a for a in answers if a.answer not in letters]
    return ItemAnswers(
        label=label, options=options, off_options=off, answers=answers, answered=len(answers)
    )
