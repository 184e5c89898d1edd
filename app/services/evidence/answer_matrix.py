"""The answers of every model on a choice or answer benchmark, read once as a matrix.

Rows are the benchmark's instances (by id), columns the detectors with predictions; the label
of each row is the current (original or resolved) value of a label set, ``reference`` by
default. Rankers, per-model accuracy and the instance page read answers through this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import func, literal, literal_column, select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.answer_arrays import read_choice_arrays
from app.services.evidence.graders import benchmark_grader
from app.services.evidence.labelled_items import slice_text
from app.services.evidence.labels import current_label_subquery
from app.services.evidence.outcomes import is_unanswerable
from app.services.evidence.payload_fields import payload_text
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
    that give them. A matrix read as arrays (``load_answers(..., arrays=True)``) holds
    ``codes`` (n, m) and ``option_probs`` (n, m, K) instead, and builds those two lists only
    when asked.
    """

    benchmark: Benchmark
    label: str
    instance_ids: NDArray[np.int64]
    external_ids: list[str]
    groups: list[str]
    labels: list[str | None]
    n_options: NDArray[np.int64]
    models: list[str]
    answer_rows: list[list[str | None]] | None = None
    probability_rows: list[dict[int, dict[str, float]]] | None = None
    slices: list[str] | None = None
    codes: NDArray[np.int64] | None = None
    option_probs: NDArray[np.float64] | None = None

    @cached_property
    def answers(self) -> list[list[str | None]]:
        """``answers[i][j]``: model ``j``'s answer to item ``i`` (None: no answer)."""
        if self.answer_rows is not None:
            return self.answer_rows
        assert self.codes is not None
        # Read as arrays: an off-option answer's text is not kept (it names no option).
        letters = [None, "?", *LETTERS]
        return [[letters[c + 2] for c in row] for row in self.codes.tolist()]

    @cached_property
    def probabilities(self) -> list[dict[int, dict[str, float]]]:
        """``probabilities[j][i]``: model ``j``'s option probabilities on item row ``i``."""
        if self.probability_rows is not None:
            return self.probability_rows
        out: list[dict[int, dict[str, float]]] = [{} for _ in self.models]
        if self.option_probs is None:
            return out
        letters = LETTERS[: self.option_probs.shape[2]]
        for row, j in zip(*np.nonzero(~np.isnan(self.option_probs).all(axis=2)), strict=True):
            out[int(j)][int(row)] = dict(
                zip(letters, self.option_probs[row, j].tolist(), strict=True)
            )
        return out

    def with_probabilities(self) -> list[int]:
        """The columns of models that gave option probabilities on some item."""
        if self.option_probs is not None:
            return np.flatnonzero(~np.isnan(self.option_probs).all(axis=(0, 2))).tolist()
        return [j for j, probs in enumerate(self.probability_rows or []) if probs]

    def option_probabilities(self, model: int) -> NDArray[np.float64]:
        """Model ``model``'s option probabilities, shape (n, K); NaN rows where it gave none."""
        if self.option_probs is not None:
            return self.option_probs[:, model, :].copy()
        k = self.n_classes
        probs = np.full((len(self.labels), k), np.nan)
        for row, p in self.probabilities[model].items():
            probs[row] = [float(p.get(letter, 0.0)) for letter in LETTERS[:k]]
        return probs

    def option_probability_array(self, models: Sequence[int]) -> NDArray[np.float64] | None:
        """Option probabilities of these models, shape (n, len(models), K), or None if none."""
        if self.option_probs is not None:
            return self.option_probs[:, list(models), :]
        given = [j for j in models if self.probabilities[j]]
        if not given:
            return None
        out = np.full((len(self.labels), len(models), self.n_classes), np.nan)
        for c, j in enumerate(models):
            if j in given:
                out[:, c, :] = self.option_probabilities(j)
        return out

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
        return self._label_index

    @cached_property
    def _label_index(self) -> NDArray[np.int64]:
        index = {letter: i for i, letter in enumerate(LETTERS)}
        codes = np.fromiter(
            (index.get(v, -1) if v is not None else -1 for v in self.labels),
            dtype=np.int64,
            count=len(self.labels),
        )
        return np.where(codes < self.n_options, codes, -1)

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
        if self.codes is not None:
            cols = list(cols)
            # Every column in order (the rankers' voters): the array itself, not a copy.
            return self.codes if cols == list(range(self.codes.shape[1])) else self.codes[:, cols]
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
    arrays: bool = False,
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
    arrays
        On a choice benchmark, read the answers as arrays (``codes``, ``option_probs``: one
        aggregated read per column, :mod:`app.services.evidence.answer_arrays`) and the items
        without their payloads; what the rankers read.

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
    if arrays and benchmark.kind == BenchmarkKind.choice.value:
        return _load_arrays(session, benchmark, label, labels, k, models, slice_field)
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
        labels=_labels(rows, resolved),
        n_options=np.array([len(r[3].get("options") or []) for r in rows], dtype=np.int64),
        models=names,
        answer_rows=answers,
        probability_rows=probabilities,
        slices=None if slice_field is None else [slice_text(r[3].get(slice_field)) for r in rows],
    )


def _labels(rows: Sequence[Any], resolved: dict[int, Any] | None) -> list[Any]:
    """Each row's label (its original, column 4, or its resolved value by id, column 0).

    An item reviewed as unanswerable has no correct answer to check answers against: None.
    """
    values = (r[4] if resolved is None else resolved.get(r[0]) for r in rows)
    return [None if is_unanswerable(v) else v for v in values]


def _option_count(dialect: str) -> Any:
    """The number of the item's options, read in the database (0 without any)."""
    if dialect == "postgresql":
        options = Instance.payload.op("->")(literal_column("'options'"))
        return func.coalesce(func.jsonb_array_length(options), 0)
    return func.coalesce(func.json_array_length(Instance.payload, literal_column("'$.options'")), 0)


def _load_arrays(
    session: Session,
    benchmark: Benchmark,
    label: str,
    labels: str,
    k: int,
    models: Sequence[str] | None,
    slice_field: str | None,
) -> AnswerMatrix:
    """:func:`load_answers` of a choice benchmark, its answers read as arrays."""
    dialect = session.get_bind().dialect.name
    value = current_label_subquery(label) if labels == "original" else None
    columns: list[Any] = [Instance.id, Instance.external_id, Instance.group_key]
    columns.append(_option_count(dialect))
    columns.append(value if value is not None else literal(None))
    if slice_field is not None:
        columns.append(payload_text(dialect, slice_field))
    result = session.connection().execute(
        select(*columns).where(Instance.benchmark_id == benchmark.id).order_by(Instance.id)
    )
    # Plain DBAPI tuples: 100,000 row objects cost as much as the read itself.
    rows = result.cursor.fetchall() if result.cursor is not None else []
    result.close()
    resolved = resolved_values(session, benchmark.id, label, k=k) if value is None else None
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    n_options = np.array([r[3] for r in rows], dtype=np.int64)
    read = read_choice_arrays(session, ids, n_options, models)
    missing = [m for j, m in enumerate(read.models) if (read.codes[:, j] == NO_ANSWER).all()]
    if models is not None and missing:
        raise InvalidInput(f"no answers of {sorted(missing)} on {benchmark.name!r}", field="models")
    return AnswerMatrix(
        benchmark=benchmark,
        label=label,
        instance_ids=ids,
        external_ids=[r[1] for r in rows],
        groups=[r[2] for r in rows],
        labels=_labels(rows, resolved),
        n_options=n_options,
        models=read.models,
        slices=None if slice_field is None else [slice_text(r[5]) for r in rows],
        codes=read.codes,
        option_probs=read.probs,
    )
