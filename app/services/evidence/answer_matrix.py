"""The answers of every model on a choice or answer benchmark, read once as a matrix.

Rows are the benchmark's instances (by id), columns the detectors with predictions; the label
of each row is the current (original or resolved) value of a label set, ``reference`` by
default. Rankers, per-model accuracy and the instance page read answers through this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.graders import benchmark_grader
from app.services.evidence.labelled_items import slice_text
from app.services.evidence.labels import current_label_subquery
from app.services.evidence.outcomes import is_unanswerable
from app.services.evidence.resolution import resolved_values
from app.stats.label_errors import NO_ANSWER, OFF_OPTIONS
from app.tables import Benchmark, BenchmarkKind, Detector, Instance, Prediction

__all__ = ["ANSWER_KINDS", "ANSWER_LABEL", "AnswerMatrix", "load_answers"]

ANSWER_KINDS = (BenchmarkKind.choice.value, BenchmarkKind.answer.value)
ANSWER_LABEL = "reference"
"""The label set that choice and answer items' answers are checked against."""
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class AnswerMatrix:
    """Every model's answer to every item, and each item's label.

    ``answers[i][j]`` is model ``j``'s answer to item ``i`` (None: no answer);
    ``probabilities[j]`` maps an item row to model ``j``'s option probabilities, for models
    that give them.
    """

    benchmark: Benchmark
    label: str
    instance_ids: NDArray[np.int64]
    external_ids: list[str]
    groups: list[str]
    labels: list[str | None]
    n_options: NDArray[np.int64]
    models: list[str]
    answers: list[list[str | None]]
    probabilities: list[dict[int, dict[str, float]]] = field(default_factory=list)
    slices: list[str] | None = None

    @property
    def is_choice(self) -> bool:
        """Whether the items have options (answers are letters)."""
        return self.benchmark.kind == BenchmarkKind.choice.value

    @property
    def n_classes(self) -> int:
        """The most options any item has (K)."""
        return int(self.n_options.max()) if self.n_options.size else 0

    def label_codes(self) -> NDArray[np.int64]:
        """The label's option index per item, -1 where unlabelled or naming no option.

        Returns
        -------
        ndarray of int64, shape (n,)

        """
        return np.array(
            [_letter_code(v, int(k)) for v, k in zip(self.labels, self.n_options, strict=True)]
        )

    def answer_codes(self, models: Sequence[int] | None = None) -> NDArray[np.int64]:
        """Answers as option indices: -1 no answer, -2 an answer naming no option.

        Parameters
        ----------
        models : sequence of int, optional
            Column indices to keep (default all).

        Returns
        -------
        ndarray of int64, shape (n, m)

        """
        cols = range(len(self.models)) if models is None else models
        out = np.full((len(self.answers), len(cols)), NO_ANSWER, dtype=np.int64)
        for i, (row, k) in enumerate(zip(self.answers, self.n_options, strict=True)):
            for c, j in enumerate(cols):
                if row[j] is not None:
                    code = _letter_code(row[j], int(k))
                    out[i, c] = OFF_OPTIONS if code < 0 else code
        return out

    def correct(self) -> NDArray[np.float64]:
        """1.0 where a model's answer matches the label, 0.0 where not, NaN without answer/label.

        Letters are compared on choice items; answer items use the benchmark's grader.

        Returns
        -------
        ndarray of float64, shape (n, m)

        """
        grade = None if self.is_choice else benchmark_grader(self.benchmark).grade
        out = np.full((len(self.answers), len(self.models)), np.nan)
        for i, (row, label) in enumerate(zip(self.answers, self.labels, strict=True)):
            if label is None:
                continue
            for j, answer in enumerate(row):
                if answer is not None:
                    ok = answer == label if grade is None else grade(answer, label)
                    out[i, j] = 1.0 if ok else 0.0
        return out


def _letter_code(value: str | None, k: int) -> int:
    if value is None or len(value) != 1 or value not in LETTERS[:k]:
        return -1
    return LETTERS.index(value)


def load_answers(
    session: Session,
    benchmark: Benchmark,
    *,
    label: str = ANSWER_LABEL,
    labels: str = "original",
    k: int = 2,
    models: Sequence[str] | None = None,
    slice_field: str | None = None,
) -> AnswerMatrix:
    """The answer matrix of a choice or answer benchmark.

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark
        A ``choice`` or ``answer`` benchmark.
    label
        Label set holding each item's correct answer.
    labels, k
        Read the original value of ``label`` or the resolved one (adjudication, else ``k``
        unanimous votes, else the original).
    models
        Detector names (columns) to read; default every detector with predictions here, by
        name.
    slice_field
        Payload field whose value is each item's slice (``"(none)"`` where absent).

    Raises
    ------
    InvalidInput
        If the benchmark is not a choice or answer benchmark, or a named model gave no answer.

    """
    if benchmark.kind not in ANSWER_KINDS:
        raise InvalidInput(
            f"benchmark {benchmark.name!r} holds {benchmark.kind} items: answers belong to "
            "choice and answer benchmarks",
            field="benchmark",
        )
    value = current_label_subquery(label) if labels == "original" else None
    columns: list[Any] = [Instance.id, Instance.external_id, Instance.group_key, Instance.payload]
    if value is not None:
        columns.append(value)
    rows = session.execute(
        select(*columns).where(Instance.benchmark_id == benchmark.id).order_by(Instance.id)
    ).all()
    resolved = resolved_values(session, benchmark.id, label, k=k) if value is None else None
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    row_of = {int(iid): i for i, iid in enumerate(ids)}
    found = session.execute(
        select(Detector.name, Prediction.instance_id, Prediction.answer, Prediction.probabilities)
        .join(Detector, Detector.id == Prediction.detector_id)
        .join(Instance, Instance.id == Prediction.instance_id)
        .where(Instance.benchmark_id == benchmark.id)
    ).all()
    names = sorted({name for name, *_ in found}) if models is None else list(models)
    missing = set(names) - {name for name, *_ in found}
    if missing:
        raise InvalidInput(f"no answers of {sorted(missing)} on {benchmark.name!r}", field="models")
    col = {name: j for j, name in enumerate(names)}
    answers: list[list[str | None]] = [[None] * len(names) for _ in rows]
    probabilities: list[dict[int, dict[str, float]]] = [{} for _ in names]
    for name, iid, answer, probs in found:
        j = col.get(name)
        if j is None:
            continue
        i = row_of[iid]
        answers[i][j] = answer
        if probs:
            probabilities[j][i] = probs
    return AnswerMatrix(
        benchmark=benchmark,
        label=label,
        instance_ids=ids,
        external_ids=[r[1] for r in rows],
        groups=[r[2] for r in rows],
        # An item reviewed as unanswerable has no correct answer to check answers against.
        labels=[
            None if is_unanswerable(value) else value
            for value in (r[4] if resolved is None else resolved.get(r[0]) for r in rows)
        ],
        n_options=np.array([len(r[3].get("options") or []) for r in rows], dtype=np.int64),
        models=names,
        answers=answers,
        probabilities=probabilities,
        slices=None if slice_field is None else [slice_text(r[3].get(slice_field)) for r in rows],
    )
