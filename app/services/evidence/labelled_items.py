"""Shared readers of a metrics request: labelled items, detector scores, AB choices, cache keys.

Every part of a metrics report (rows, comparisons, plots) and the disagreement finder read the
store through these functions.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    LargeBinary,
    Select,
    func,
    literal,
    select,
)
from sqlalchemy import cast as sa_cast
from sqlalchemy.orm import Session

from app.errors import InvalidInput, NotFound
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.binary_target import BinaryTarget, binary_target
from app.services.evidence.flips import FLIP_PREFIX
from app.services.evidence.labels import current_label_subquery, label_names
from app.services.evidence.payload_fields import payload_text
from app.services.evidence.resolution import check_k, resolved_values
from app.sql.kept_arrays import (
    Arrays,
    coded_texts,
    decoded_texts,
    kept_arrays,
    kept_name,
    text_array,
    texts,
)
from app.tables import Benchmark, Detector, Instance, Judgment, Order, Score

__all__ = [
    "LABEL_MODES",
    "MISSING_SLICE",
    "LabelColumns",
    "LabelMode",
    "LabelledItems",
    "ab_choices",
    "check_label_mode",
    "data_key",
    "detector_scores",
    "get_detector",
    "label_columns_name",
    "label_key",
    "load_labelled",
    "read_label_columns",
    "read_score_arrays",
    "scored_detectors",
    "scores_name",
]

MISSING_SLICE = "(none)"
"""The slice of items whose payload lacks the slice field."""

LabelMode = Literal["original", "resolved"]
LABEL_MODES: tuple[LabelMode, ...] = ("original", "resolved")
"""Which value of a label set metrics read: the original, or the value after review."""


def check_label_mode(labels: str) -> LabelMode:
    """``labels`` if it is one of :data:`LABEL_MODES`, else :class:`InvalidInput`."""
    if labels not in LABEL_MODES:
        raise InvalidInput(
            f"labels must be one of {', '.join(LABEL_MODES)}, got {labels!r}", field="labels"
        )
    return cast(LabelMode, labels)


@dataclass(frozen=True)
class LabelledItems:
    """The instances of a benchmark that carry a class of the target, in instance-id order.

    ``y`` is 1 for the positive class; ``slices`` is ``None`` unless a slice field was read.
    """

    benchmark: Benchmark
    target: BinaryTarget
    instance_ids: NDArray[np.int64]
    external_ids: list[str]
    groups: list[str]
    values: list[str]
    y: NDArray[np.int8]
    slices: list[str] | None = None
    excluded: int = 0

    def index(self) -> dict[int, int]:
        """``{instance_id: row}``."""
        return {int(iid): row for row, iid in enumerate(self.instance_ids)}


def load_labelled(
    session: Session,
    benchmark: str | Benchmark,
    label: str,
    *,
    positive: str | None = None,
    slice_field: str | None = None,
    labels: LabelMode = "original",
    k: int = 2,
) -> LabelledItems:
    """The benchmark's items with a value of ``label``, and its binary target.

    With ``labels="original"`` each item's value is the label set's current (original) value;
    with ``"resolved"`` it is the value after review (the latest adjudication, else ``k``
    unanimous votes, else the original: :func:`~app.services.evidence.resolution.resolved_values`).
    Items whose value is null (never labelled, retracted, or adjudicated to no label) are left
    out, as are items whose value is neither class of the target.

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark
        Benchmark name or row.
    label
        Label set name.
    positive
        Explicit positive class (see :func:`binary_target`).
    slice_field
        Payload field whose text value is each item's slice.
    labels
        ``"original"`` or ``"resolved"`` (see above).
    k
        Agreeing voters needed for votes to override the original (``"resolved"`` only;
        checked either way).

    Returns
    -------
    LabelledItems

    Raises
    ------
    NotFound
        For an unknown benchmark or a label set with no value on it.
    InvalidInput
        For a label set that is not binary, a malformed slice field name, an unknown
        ``labels`` mode or ``k`` below 1.

    """
    labels = check_label_mode(labels)
    check_k(k)
    bench = get_benchmark(session, benchmark) if isinstance(benchmark, str) else benchmark
    if labels == "original":
        kept = kept_arrays(session, bench, label_columns_name(label, slice_field))
        columns = LabelColumns.from_arrays(kept) if kept is not None else None
        if columns is None:
            columns = _read_columns(session, bench, label, slice_field, None)
    else:
        resolved = resolved_values(session, bench.id, label, k=k)
        columns = _read_columns(session, bench, label, slice_field, resolved)
    if not columns.values:
        what = "no label set" if labels == "original" else "no resolved value of label set"
        # The names it has, so a typo is fixed without another command to list them.
        known = known_names(label_names(session, bench.id))
        raise NotFound(f"benchmark {bench.name!r} has {what} {label!r}; label sets: {known}")
    ids, external_ids, groups = columns.ids, columns.external_ids, columns.groups
    values, slice_column = columns.values, columns.slices
    # The target's code of each distinct value (a handful), not of each row.
    distinct = set(values)
    target = binary_target(label, distinct, positive)
    # -1 for a value of neither class; straight into bytes, no array of Python objects.
    code = {v: -1 if (c := target.encode(v)) is None else c for v in distinct}
    encoded = np.fromiter(map(code.__getitem__, values), dtype=np.int8, count=len(values))
    kept_rows = encoded >= 0
    every = len(values)
    if not kept_rows.all():
        where = np.flatnonzero(kept_rows)
        listed = where.tolist()
        ids = ids[where]
        external_ids, groups, values = (
            [column[i] for i in listed] for column in (external_ids, groups, values)
        )
        if slice_column is not None:
            slice_column = [slice_column[i] for i in listed]
    return LabelledItems(
        benchmark=bench,
        target=target,
        instance_ids=ids,
        external_ids=external_ids,
        groups=groups,
        values=values,
        y=encoded[kept_rows],
        slices=None if slice_column is None else [slice_text(v) for v in slice_column],
        excluded=every - len(values),
    )


@dataclass(frozen=True)
class LabelColumns:
    """The items of a benchmark with a value of a label set, before any target: columns.

    ``slices`` holds the raw payload value of the slice field (``None`` when none was read).
    """

    ids: NDArray[np.int64]
    external_ids: list[str]
    groups: list[str]
    values: list[str]
    slices: list[Any] | None = None

    def to_arrays(self) -> Arrays:
        """The columns as named arrays (text as JSON bytes), for :func:`keep_arrays`."""
        arrays: Arrays = {"ids": self.ids, "external_ids": text_array(self.external_ids)}
        for name in ("groups", "values"):  # few distinct values: codes and a vocabulary
            arrays[f"{name}.codes"], arrays[f"{name}.vocabulary"] = coded_texts(getattr(self, name))
        if self.slices is not None:
            arrays["slices"] = text_array(self.slices)
        return arrays

    @classmethod
    def from_arrays(cls, arrays: Arrays) -> LabelColumns:
        """The columns :meth:`to_arrays` wrote."""
        return cls(
            ids=arrays["ids"].astype(np.int64, copy=False),
            external_ids=texts(arrays["external_ids"]),
            groups=decoded_texts(arrays["groups.codes"], arrays["groups.vocabulary"]),
            values=decoded_texts(arrays["values.codes"], arrays["values.vocabulary"]),
            slices=texts(arrays["slices"]) if "slices" in arrays else None,
        )


def label_columns_name(label: str, slice_field: str | None = None) -> str:
    """The kept name of the original-label columns of ``label`` (with ``slice_field`` read)."""
    return kept_name("labels", label, slice_field)


def read_label_columns(
    session: Session, bench: Benchmark, label: str, slice_field: str | None = None
) -> LabelColumns:
    """The original-label columns of ``label`` read from the rows (never from a kept copy)."""
    return _read_columns(session, bench, label, slice_field, None)


def _read_columns(
    session: Session,
    bench: Benchmark,
    label: str,
    slice_field: str | None,
    resolved: dict[int, str] | None,
) -> LabelColumns:
    """The items with a value: the original one, or the one in ``resolved`` when given."""
    columns: list[Any] = [Instance.id, Instance.external_id, Instance.group_key]
    if resolved is None:
        columns.append(current_label_subquery(label).label("value"))
    if slice_field is not None:
        try:
            columns.append(payload_text(session.get_bind().dialect.name, slice_field))
        except ValueError as exc:
            raise InvalidInput(str(exc), field="slice") from None
    q = select(*columns).where(Instance.benchmark_id == bench.id).order_by(Instance.id)
    rows: list[Sequence[Any]]
    if resolved is None:
        rows = [r for r in _plain_rows(session, q) if r[3] is not None]
    else:
        # The value takes the label's column slot so the rows look alike from here on.
        rows = [
            (*r[:3], resolved[r[0]], *r[3:]) for r in _plain_rows(session, q) if r[0] in resolved
        ]
    if not rows:
        return LabelColumns(np.empty(0, dtype=np.int64), [], [], [], None)
    ids, external_ids, groups, values, *slice_column = (list(c) for c in zip(*rows, strict=True))
    return LabelColumns(
        np.array(ids, dtype=np.int64),
        external_ids,
        groups,
        values,
        slice_column[0] if slice_field is not None else None,
    )


def _plain_rows(session: Session, query: Select[Any]) -> list[tuple[Any, ...]]:
    """The rows of ``query`` as plain DBAPI tuples.

    A 100,000-item benchmark is 100,000 rows: SQLAlchemy's row objects cost as much as the
    read itself, and these columns (integers and text) need none of its type processing.
    """
    result = session.connection().execute(query)
    try:
        return result.cursor.fetchall() if result.cursor is not None else []
    finally:
        result.close()


def label_key(labels: LabelMode, k: int) -> tuple[Hashable, ...]:
    """The part of a cache key that says which labels were read.

    ``k`` only shapes resolved labels: original rows are shared by every ``k``.
    """
    return (labels, k if labels == "resolved" else None)


def slice_text(value: Any) -> str:
    """The slice of a payload value: its text, or ``"(none)"`` when absent or empty."""
    return MISSING_SLICE if value is None or value == "" else str(value)


def data_key(
    session: Session, benchmark: Benchmark, *, evidence: bool = False
) -> tuple[Hashable, ...]:
    """What identifies a benchmark's data in a process-wide cache.

    The database URL and creation time guard against another store, or a deleted benchmark
    whose id was reused, sharing a key; ``data_version`` changes with every write. With
    ``evidence``, the key of what reads only the evidence and original labels:
    ``evidence_version``, which review events (votes, adjudications) leave alone.
    """
    return (
        str(session.get_bind().engine.url),
        benchmark.id,
        str(benchmark.created_at),
        ("evidence", benchmark.evidence_version) if evidence else benchmark.data_version,
    )


# Names an error lists at most: a store can hold thousands of detectors.
KNOWN_SHOWN = 20


def known_names(names: Sequence[str], total: int | None = None) -> str:
    """``names`` for an error message: the first :data:`KNOWN_SHOWN`, then how many in all."""
    total = len(names) if total is None else total
    if not total:
        return "none"
    shown = ", ".join(names[:KNOWN_SHOWN])
    return shown if total <= KNOWN_SHOWN else f"{shown}, ... ({total:,} in all)"


def get_detector(session: Session, name: str) -> Detector:
    """The detector called ``name``; :class:`NotFound` listing the known names if none is."""
    found = session.scalar(select(Detector).where(Detector.name == name))
    if found is not None:
        return found
    names = list(session.scalars(select(Detector.name).order_by(Detector.name).limit(KNOWN_SHOWN)))
    total = session.scalar(select(func.count()).select_from(Detector)) or 0
    raise NotFound(f"no detector named {name!r}; detectors: {known_names(names, total)}")


def scored_detectors(session: Session, benchmark: Benchmark) -> list[Detector]:
    """Detectors with at least one score on the benchmark, by name."""
    # EXISTS per detector stops at its first score on the benchmark; a DISTINCT over the join
    # read every score of the benchmark (1 s at 1M scores).
    has_score = (
        select(Score.id)
        .join(Instance, Instance.id == Score.instance_id)
        .where(Score.detector_id == Detector.id, Instance.benchmark_id == benchmark.id)
        .exists()
    )
    return list(session.scalars(select(Detector).where(has_score).order_by(Detector.name)))


def detector_scores(
    session: Session, detector: Detector, items: LabelledItems
) -> NDArray[np.float64]:
    """The detector's score of each item, NaN where it has none.

    Returns
    -------
    ndarray of float64, shape (n_items,)

    """
    out = np.full(items.instance_ids.size, np.nan)
    if items.instance_ids.size == 0:
        return out
    kept = kept_arrays(session, items.benchmark, scores_name(detector.id))
    if kept is not None:
        ids, scores = kept["ids"], kept["scores"]
    else:
        # By id range, no join: the items' ids are known, and the binary search below drops
        # any score of another benchmark's instance inside the range (a join with the
        # instances costs a lookup per score).
        lo, hi = int(items.instance_ids[0]), int(items.instance_ids[-1])
        ids, scores = _score_arrays(
            session, Score.detector_id == detector.id, Score.instance_id.between(lo, hi)
        )
    # The items are in instance-id order: each scored id's row by binary search, no dict.
    at = np.searchsorted(items.instance_ids, ids)
    hit = at < items.instance_ids.size
    hit[hit] = items.instance_ids[at[hit]] == ids[hit]
    out[at[hit]] = scores[hit]
    return out


def scores_name(detector_id: int) -> str:
    """The kept name of a detector's scores on a benchmark."""
    return kept_name("scores", detector_id)


def read_score_arrays(session: Session, bench: Benchmark, detector: Detector) -> Arrays:
    """The detector's scores of ``bench``'s instances read from the rows, for keeping.

    Returns
    -------
    dict
        ``ids`` (int64, shape (n_scored,)) and ``scores`` (float64, same shape; NaN for a
        null score).

    """
    of_bench = select(Instance.id).where(Instance.benchmark_id == bench.id)
    ids, scores = _score_arrays(
        session, Score.detector_id == detector.id, Score.instance_id.in_(of_bench)
    )
    # In instance-id order: whoever reads them aligns by binary search.
    order = np.argsort(ids, kind="stable")
    return {"ids": ids[order], "scores": scores[order]}


def _score_arrays(
    session: Session, *where: ColumnElement[bool]
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Instance ids and scores of the ``Score`` rows matching ``where``; a null score is NaN."""
    if session.get_bind().dialect.name == "postgresql":
        # One row of two byte strings, each value in its 8-byte big-endian binary form, read
        # straight into arrays: a million rows as Python tuples cost 0.4 s of client CPU.
        # Both aggregates read the rows in the same order, so the arrays line up.
        nothing = literal(b"", LargeBinary)
        score = func.coalesce(Score.score, literal(float("nan"), Float))
        q = select(
            func.string_agg(func.int8send(sa_cast(Score.instance_id, BigInteger)), nothing),
            func.string_agg(func.float8send(score), nothing),
        ).where(*where)
        ids, scores = session.execute(q).one()
        if ids is None:
            return np.empty(0, dtype=np.int64), np.empty(0)
        return (
            np.frombuffer(ids, dtype=">i8").astype(np.int64),
            np.frombuffer(scores, dtype=">f8").astype(np.float64),
        )
    # One row of two comma-separated texts, parsed by numpy: 100,000 rows as Python tuples cost
    # more than the read itself. 17 significant digits ('!' lifts SQLite's limit of 16) read
    # back as the stored double; a null score is "nan".
    text = func.iif(Score.score.is_(None), "nan", func.printf("%!.17g", Score.score))
    q = select(func.group_concat(Score.instance_id), func.group_concat(text)).where(*where)
    ids, scores = session.execute(q).one()
    if not ids:
        return np.empty(0, dtype=np.int64), np.empty(0)
    return (
        np.fromstring(ids, dtype=np.int64, sep=","),
        np.fromstring(scores, dtype=np.float64, sep=","),
    )


def ab_choices(session: Session, items: LabelledItems) -> list[str] | None:
    """For a ``flip:<judge>`` label set, the judge's AB choice per item (the CM-AUROC stratum)."""
    if not items.target.label.startswith(FLIP_PREFIX):
        return None
    judge = session.scalar(
        select(Detector).where(Detector.name == items.target.label.removeprefix(FLIP_PREFIX))
    )
    if judge is None:
        return None
    q = (
        select(Judgment.instance_id, Judgment.choice)
        .join(Instance, Instance.id == Judgment.instance_id)
        .where(
            Judgment.detector_id == judge.id,
            Judgment.order == Order.AB.value,
            Instance.benchmark_id == items.benchmark.id,
        )
    )
    by_instance = dict(_plain_rows(session, q))
    return [by_instance.get(int(i), "none") for i in items.instance_ids]
