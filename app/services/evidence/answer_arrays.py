"""Every model's answers on a choice benchmark, read as arrays: one aggregated read per column.

A 100,000-item benchmark answered by 20 models holds 2,000,000 predictions. Read as rows, each a
tuple of Python objects (with its probabilities as a parsed JSON dict), that costs seconds before
any ranker runs; here the database codes each answer as an option index and aggregates each
model's instance ids, codes and option probabilities into one value per column, which numpy reads
whole (PostgreSQL: the values' binary send forms, concatenated; SQLite: comma-separated text).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Integer,
    LargeBinary,
    case,
    func,
    literal,
    literal_column,
    select,
)
from sqlalchemy import cast as sa_cast
from sqlalchemy.orm import Session

from app.stats.label_errors import NO_ANSWER, OFF_OPTIONS
from app.tables import Detector, Prediction

__all__ = ["ChoiceArrays", "read_choice_arrays"]

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class ChoiceArrays:
    """Coded answers and option probabilities of some models on some items.

    Attributes
    ----------
    models : list of str
        Detector names, the columns.
    codes : ndarray of int64, shape (n, m)
        Option index of model j's answer on item i; -1 no answer, -2 an answer naming none of
        the item's options.
    probs : ndarray of float64, shape (n, m, K), optional
        Model j's probability of each option on item i, NaN where it gave none; ``None`` when
        no model gave any.

    """

    models: list[str]
    codes: NDArray[np.int64]
    probs: NDArray[np.float64] | None


def _letter_code() -> ColumnElement[int]:
    """The answer's letter index (A = 0), -2 for any other text."""
    return case({letter: i for i, letter in enumerate(LETTERS)}, value=Prediction.answer, else_=-2)


def _probability(dialect: str, letter: str) -> ColumnElement[Any]:
    """The answer's probability of option ``letter`` as a float, NULL where it has none."""
    if dialect == "postgresql":
        text = Prediction.probabilities.op("->>")(literal_column(f"'{letter}'"))
        return sa_cast(text, Float)
    return func.json_extract(Prediction.probabilities, literal_column(f"'$.{letter}'"))


def _aggregate(dialect: str, column: ColumnElement[Any], kind: str) -> ColumnElement[Any]:
    """One value holding ``column`` of every row of a group, in the group's row order.

    Every aggregate of one query reads a group's rows in the same order, so the columns line up.
    """
    if dialect == "postgresql":
        nothing = literal(b"", LargeBinary)
        if kind == "int":
            return func.string_agg(func.int8send(sa_cast(column, BigInteger)), nothing)
        value = func.coalesce(column, literal(float("nan"), Float))
        return func.string_agg(func.float8send(value), nothing)
    if kind == "int":
        return func.group_concat(column)
    # 17 significant digits ('!' lifts SQLite's 16-digit limit): the text reads back exactly.
    value = func.iif(column.is_(None), "nan", func.printf("%!.17g", column))
    return func.group_concat(value)


def _array(dialect: str, value: Any, kind: str) -> NDArray[Any]:
    dtype = np.int64 if kind == "int" else np.float64
    if value is None or len(value) == 0:
        return np.empty(0, dtype=dtype)
    if dialect == "postgresql":
        return np.frombuffer(value, dtype=">i8" if kind == "int" else ">f8").astype(dtype)
    return np.fromstring(value, dtype=dtype, sep=",")


def read_choice_arrays(
    session: Session,
    instance_ids: NDArray[np.int64],
    n_options: NDArray[np.int64],
    models: Sequence[str] | None = None,
) -> ChoiceArrays:
    """Every (or the named) model's answers on these items of one benchmark, as arrays.

    Parameters
    ----------
    session
        The caller's session (read only).
    instance_ids : ndarray of int64, shape (n,)
        The benchmark's instance ids, ascending (predictions are read by id range).
    n_options : ndarray of int64, shape (n,)
        Options per item: a letter beyond them names no option.
    models : sequence of str, optional
        Detector names, the columns; default every detector with an answer here, by name.

    Returns
    -------
    ChoiceArrays
        A named model without answers has an all -1 column.

    """
    dialect = session.get_bind().dialect.name
    n = int(instance_ids.size)
    k = int(n_options.max()) if n else 0
    if n == 0:
        return ChoiceArrays(list(models or []), np.empty((0, 0), dtype=np.int64), None)
    lo, hi = int(instance_ids[0]), int(instance_ids[-1])
    in_range = Prediction.instance_id.between(lo, hi)
    q = (
        select(
            Prediction.detector_id,
            _aggregate(dialect, Prediction.instance_id, "int"),
            _aggregate(dialect, sa_cast(_letter_code(), Integer), "int"),
            func.count(_probability(dialect, LETTERS[0])),
        )
        .where(in_range)
        .group_by(Prediction.detector_id)
    )
    grouped = {int(d): (ids, codes, int(c)) for d, ids, codes, c in session.execute(q)}
    names = {
        int(d): str(name)
        for d, name in session.execute(
            select(Detector.id, Detector.name).where(Detector.id.in_(list(grouped)))
        )
    }
    # Only detectors with an answer on one of the items (the id range may hold other benchmarks').
    columns: dict[str, tuple[NDArray[np.intp], NDArray[np.bool_], int]] = {}
    codes_of: dict[str, NDArray[np.int64]] = {}
    with_probs: list[int] = []
    for detector_id, (ids_value, codes_value, n_probs) in grouped.items():
        ids = _array(dialect, ids_value, "int")
        at = np.searchsorted(instance_ids, ids)
        hit = at < n
        hit[hit] = instance_ids[at[hit]] == ids[hit]
        if not hit.any():
            continue
        name = names[detector_id]
        columns[name] = (at, hit, detector_id)
        codes_of[name] = _array(dialect, codes_value, "int")
        if n_probs:
            with_probs.append(detector_id)
    order = sorted(columns) if models is None else list(models)
    codes = np.full((n, len(order)), NO_ANSWER, dtype=np.int64)
    for j, name in enumerate(order):
        if name not in columns:
            continue
        at, hit, _ = columns[name]
        code = codes_of[name][hit]
        rows = at[hit]
        codes[rows, j] = np.where((code < 0) | (code >= n_options[rows]), OFF_OPTIONS, code)
    probs = None
    wanted = [columns[name][2] for name in order if name in columns]
    with_probs = [d for d in with_probs if d in wanted]
    if with_probs and k:
        probs = np.full((n, len(order), k), np.nan)
        col = {columns[name][2]: j for j, name in enumerate(order) if name in columns}
        q = (
            select(
                Prediction.detector_id,
                _aggregate(dialect, Prediction.instance_id, "int"),
                *(
                    _aggregate(dialect, _probability(dialect, letter), "float")
                    for letter in LETTERS[:k]
                ),
            )
            .where(in_range, Prediction.detector_id.in_(with_probs))
            .group_by(Prediction.detector_id)
        )
        for detector_id, ids_value, *values in session.execute(q):
            ids = _array(dialect, ids_value, "int")
            at = np.searchsorted(instance_ids, ids)
            hit = at < n
            hit[hit] = instance_ids[at[hit]] == ids[hit]
            block = np.column_stack([_array(dialect, v, "float") for v in values])
            probs[at[hit], col[int(detector_id)]] = block[hit]
        # An option a model's probabilities leave out has probability 0 (an item's missing
        # options too); a row with none at all stays NaN: that model gave no probabilities.
        given = ~np.isnan(probs).all(axis=2)
        probs = np.where(given[:, :, None] & np.isnan(probs), 0.0, probs)
    return ChoiceArrays(order, codes, probs)
