"""The metric matrix: detectors x slices (+ macro-average) against one label set, with intervals.

Also the shared readers of labelled items and detector scores, and the binary-target rule that
turns a label set into 0/1 (also used by the disagreement finder).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput, NotFound
from app.services.benchmarks import get_benchmark
from app.services.cache import VersionedCache
from app.services.flips import FLIP_PREFIX
from app.services.labels import current_label_subquery
from app.services.payload_fields import payload_text
from app.services.resolution import check_k, resolved_values
from app.stats import _validate
from app.stats.bootstrap import group_bootstrap, percentile_interval
from app.tables import Benchmark, Detector, Instance, Judgment, Order, Score

__all__ = [
    "INTERVAL_METRICS",
    "LABEL_MODES",
    "MACRO",
    "METRICS_CACHE",
    "BinaryTarget",
    "LabelMode",
    "LabelledItems",
    "MetricRow",
    "ab_choices",
    "binary_target",
    "check_label_mode",
    "data_key",
    "detector_scores",
    "get_detector",
    "label_key",
    "load_labelled",
    "metric_rows",
    "metrics_report",
    "scored_detectors",
]

INTERVAL_METRICS: tuple[str, ...] = ("auroc", "auprc", "brier", "choice_matched_auroc")
"""Metrics reported with a group-bootstrap interval (prevalence is reported as a point)."""

MACRO = "(macro-average)"
"""The ``slice`` value of the macro-average row; the all-items row has ``slice = None``."""

MISSING_SLICE = "(none)"
"""The slice of items whose payload lacks the slice field."""

# Known two-class vocabularies, positive class first. `reference` on pairwise benchmarks says
# which response is correct and scores are P(A is better), so "A" is positive; flip and truth
# label sets are "1"/"0" and scores are P(flip) / P(true), so "1" is positive.
KNOWN_TARGETS: tuple[tuple[str, str], ...] = (("A", "B"), ("1", "0"))

METRICS_CACHE = VersionedCache(maxsize=512)
"""Process-wide memo of metric rows, keyed on the benchmark's ``data_version``."""

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
class BinaryTarget:
    """How a label set becomes a 0/1 target: ``positive`` -> 1, ``negative`` -> 0.

    Detector scores are read as the probability of ``positive``; items whose label is neither
    class are left out of every metric.
    """

    label: str
    positive: str
    negative: str | None
    rule: str

    def encode(self, value: str | None) -> int | None:
        """1, 0, or None for a value outside the two classes."""
        if value == self.positive:
            return 1
        if value is not None and value == self.negative:
            return 0
        return None

    def other(self, value: str) -> str:
        """The class opposite to ``value`` (``"not X"`` when the set holds one class only)."""
        if value == self.positive:
            return self.negative if self.negative is not None else f"not {self.positive}"
        return self.positive


def binary_target(label: str, values: Collection[str], positive: str | None = None) -> BinaryTarget:
    """The binary target of label set ``label`` whose current values are ``values``.

    Rule: with ``positive`` given, that value is class 1 and the only other value (if any)
    class 0. Otherwise the values must lie in a known vocabulary: ``{"A", "B"}`` (positive
    ``"A"``, matching scores that are P(A is better)) or ``{"1", "0"}`` (positive ``"1"``).

    Parameters
    ----------
    label : str
        Label set name (for messages).
    values : collection of str
        The distinct current values of the label set.
    positive : str, optional
        Explicit positive class.

    Returns
    -------
    BinaryTarget

    Raises
    ------
    InvalidInput
        If the label set has more than two values, or none in a known vocabulary and no
        ``positive`` is given, or ``positive`` is not one of its values.

    """
    distinct = sorted(set(values))
    if positive is not None:
        others = [v for v in distinct if v != positive]
        if positive not in distinct or len(others) > 1:
            raise InvalidInput(
                f"label set {label!r} has values {distinct}; positive={positive!r} must be one "
                "of exactly two classes"
            )
        negative = others[0] if others else None
        return BinaryTarget(label, positive, negative, f"{positive!r} = 1 (given), else 0")
    for pos, neg in KNOWN_TARGETS:
        if set(distinct) <= {pos, neg}:
            return BinaryTarget(
                label, pos, neg, f"{pos!r} = 1, {neg!r} = 0; scores read as P({pos})"
            )
    raise InvalidInput(
        f"label set {label!r} has values {distinct[:10]}: not a known binary vocabulary "
        "(A/B or 1/0); name the positive class"
    )


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
    unanimous votes, else the original: :func:`~app.services.resolution.resolved_values`).
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
    columns: list[Any] = [Instance.id, Instance.external_id, Instance.group_key]
    if labels == "original":
        columns.append(current_label_subquery(label).label("value"))
    if slice_field is not None:
        try:
            columns.append(payload_text(session.get_bind().dialect.name, slice_field))
        except ValueError as exc:
            raise InvalidInput(str(exc), field="slice") from None
    q = select(*columns).where(Instance.benchmark_id == bench.id).order_by(Instance.id)
    rows: list[Sequence[Any]]
    if labels == "original":
        rows = [r for r in session.execute(q) if r[3] is not None]
    else:
        # One grouped read of the review history; the value takes the label's column slot so
        # the rows look alike from here on.
        resolved = resolved_values(session, bench.id, label, k=k)
        rows = [(*r[:3], resolved[r[0]], *r[3:]) for r in session.execute(q) if r[0] in resolved]
    if not rows:
        what = "no label set" if labels == "original" else "no resolved value of label set"
        raise NotFound(f"benchmark {bench.name!r} has {what} {label!r}")
    target = binary_target(label, {r[3] for r in rows}, positive)
    kept = [r for r in rows if target.encode(r[3]) is not None]
    return LabelledItems(
        benchmark=bench,
        target=target,
        instance_ids=np.array([r[0] for r in kept], dtype=np.int64),
        external_ids=[r[1] for r in kept],
        groups=[r[2] for r in kept],
        values=[r[3] for r in kept],
        y=np.array([target.encode(r[3]) for r in kept], dtype=np.int8),
        slices=None if slice_field is None else [_slice_text(r[4]) for r in kept],
        excluded=len(rows) - len(kept),
    )


def label_key(labels: LabelMode, k: int) -> tuple[Hashable, ...]:
    """The part of a cache key that says which labels were read.

    ``k`` only shapes resolved labels: original rows are shared by every ``k``.
    """
    return (labels, k if labels == "resolved" else None)


def _slice_text(value: Any) -> str:
    return MISSING_SLICE if value is None or value == "" else str(value)


def data_key(session: Session, benchmark: Benchmark) -> tuple[Hashable, ...]:
    """What identifies a benchmark's data in a process-wide cache.

    The database URL and creation time guard against another store, or a deleted benchmark
    whose id was reused, sharing a key; ``data_version`` changes with every write.
    """
    return (
        str(session.get_bind().engine.url),
        benchmark.id,
        str(benchmark.created_at),
        benchmark.data_version,
    )


def get_detector(session: Session, name: str) -> Detector:
    """The detector called ``name``; :class:`NotFound` if there is none."""
    detector = session.scalar(select(Detector).where(Detector.name == name))
    if detector is None:
        raise NotFound(f"no detector named {name!r}")
    return detector


def scored_detectors(session: Session, benchmark: Benchmark) -> list[Detector]:
    """Detectors with at least one score on the benchmark, by name."""
    has_score = (
        select(Score.detector_id)
        .join(Instance, Instance.id == Score.instance_id)
        .where(Instance.benchmark_id == benchmark.id)
        .distinct()
    )
    return list(
        session.scalars(select(Detector).where(Detector.id.in_(has_score)).order_by(Detector.name))
    )


def detector_scores(
    session: Session, detector: Detector, items: LabelledItems
) -> NDArray[np.float64]:
    """The detector's score of each item, NaN where it has none.

    Returns
    -------
    ndarray of float64, shape (n_items,)

    """
    q = (
        select(Score.instance_id, Score.score)
        .join(Instance, Instance.id == Score.instance_id)
        .where(Score.detector_id == detector.id, Instance.benchmark_id == items.benchmark.id)
    )
    out = np.full(items.instance_ids.size, np.nan)
    where = items.index()
    for instance_id, score in session.execute(q):
        row = where.get(instance_id)
        if row is not None:
            out[row] = score
    return out


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
    by_instance = dict(session.execute(q).all())
    return [by_instance.get(int(i), "none") for i in items.instance_ids]


@dataclass(frozen=True)
class MetricRow:
    """One row of the matrix: a detector on all items, one slice, or the macro-average.

    ``values`` holds ``prevalence`` and each of ``INTERVAL_METRICS`` (``None`` when undefined
    or not applicable: AUROC with one class, Brier of non-probability scores, choice-matched
    AUROC outside flip label sets); ``intervals`` the 95% percentile interval of each.
    """

    detector: str
    slice: str | None
    kind: str  # "all" | "slice" | "macro"
    n: int
    n_groups: int
    values: dict[str, float | None]
    intervals: dict[str, list[float] | None]
    valid_resamples: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The JSON row of ``appellate metrics --json``."""
        out: dict[str, Any] = {
            "detector": self.detector,
            "slice": self.slice,
            "n": self.n,
            "prevalence": self.values.get("prevalence"),
        }
        for name in INTERVAL_METRICS:
            out[name] = self.values.get(name)
            out[f"{name}_ci"] = self.intervals.get(name)
        return out


@dataclass
class _Cell:
    """One bootstrap of one detector on one subset, kept for the macro-average."""

    row: MetricRow
    replicates: dict[str, NDArray[np.float64]]


def _evaluate(
    detector: str,
    slice_name: str | None,
    kind: str,
    y: NDArray[np.int8],
    p: NDArray[np.float64],
    groups: list[str],
    choice: list[str] | None,
    resamples: int,
    seed: int,
) -> _Cell:
    n = int(y.size)
    values: dict[str, float | None] = dict.fromkeys(("prevalence", *INTERVAL_METRICS))
    intervals: dict[str, list[float] | None] = dict.fromkeys(INTERVAL_METRICS)
    if n == 0:
        return _Cell(MetricRow(detector, slice_name, kind, 0, 0, values, intervals), {})
    values["prevalence"] = float(y.mean())
    wanted = ["auroc", "auprc"]
    if _validate.is_probability(p):
        wanted.append("brier")
    if choice is not None:
        wanted.append("choice_matched_auroc")
    result = group_bootstrap(
        y, p, groups, metrics=wanted, choice=choice, resamples=resamples, seed=seed
    )
    valid: dict[str, int] = {}
    for name in wanted:
        estimate = result.estimate(name)
        values[name], intervals[name], valid[name] = estimate.value, estimate.ci, estimate.valid
    row = MetricRow(detector, slice_name, kind, n, result.n_groups, values, intervals, valid)
    return _Cell(row, {m: result.replicates[m][0] for m in wanted})


def _macro(detector: str, cells: list[_Cell]) -> MetricRow:
    """Mean over slices of each metric defined there; the interval averages slice replicates.

    Each slice is resampled on its own (a bootstrap stratified by slice), so replicate b of the
    macro-average is the mean of the slices' replicates b; a resample where any contributing
    slice is undefined is dropped.
    """
    values: dict[str, float | None] = {}
    intervals: dict[str, list[float] | None] = {}
    valid: dict[str, int] = {}
    prevalences = [c.row.values["prevalence"] for c in cells if c.row.n]
    values["prevalence"] = float(np.mean(prevalences)) if prevalences else None
    for name in INTERVAL_METRICS:
        defined = [c for c in cells if c.row.values.get(name) is not None]
        if not defined:
            values[name], intervals[name] = None, None
            continue
        values[name] = float(np.mean([c.row.values[name] for c in defined]))
        low, high, valid[name] = percentile_interval(
            np.mean([c.replicates[name] for c in defined], axis=0)
        )
        intervals[name] = None if low is None or high is None else [low, high]
    n = sum(c.row.n for c in cells)
    n_groups = sum(c.row.n_groups for c in cells)
    return MetricRow(detector, MACRO, "macro", n, n_groups, values, intervals, valid)


def _slice_seed(seed: int, index: int) -> int:
    # Independent streams per slice: equal seeds would draw correlated resamples across slices.
    return int(np.random.SeedSequence([seed, index + 1]).generate_state(1)[0])


def _detector_rows(
    session: Session,
    items: LabelledItems,
    detector: Detector,
    choice: list[str] | None,
    resamples: int,
    seed: int,
) -> tuple[MetricRow, ...]:
    p_all = detector_scores(session, detector, items)
    scored = ~np.isnan(p_all)
    y, p = items.y[scored], p_all[scored]
    groups = [g for g, keep in zip(items.groups, scored, strict=True) if keep]
    strata = None if choice is None else [c for c, k in zip(choice, scored, strict=True) if k]
    rows = [_evaluate(detector.name, None, "all", y, p, groups, strata, resamples, seed).row]
    if items.slices is None:
        return tuple(rows)
    slices = np.array(
        [s for s, keep in zip(items.slices, scored, strict=True) if keep], dtype=object
    )
    cells = []
    for index, name in enumerate(sorted(set(items.slices))):
        mask = slices == name
        cell = _evaluate(
            detector.name,
            name,
            "slice",
            y[mask],
            p[mask],
            [g for g, keep in zip(groups, mask, strict=True) if keep],
            None if strata is None else [c for c, k in zip(strata, mask, strict=True) if k],
            resamples,
            _slice_seed(seed, index),
        )
        cells.append(cell)
        rows.append(cell.row)
    rows.append(_macro(detector.name, cells))
    return tuple(rows)


def metric_rows(
    session: Session,
    benchmark: str,
    label: str = "reference",
    detectors: Sequence[str] | None = None,
    *,
    slice_field: str | None = None,
    positive: str | None = None,
    resamples: int = 2000,
    seed: int = 0,
    cache: VersionedCache | None = METRICS_CACHE,
    labels: LabelMode = "original",
    k: int = 2,
) -> tuple[BinaryTarget, list[MetricRow]]:
    """Metric rows of detectors on a benchmark against a label set, with group-bootstrap CIs.

    For each detector: one row over all items it scored (``slice=None``), and with
    ``slice_field`` one row per slice value (sorted; ``"(none)"`` when the field is absent)
    and a macro-average row (``slice=MACRO``). Scores are read as P(positive class) of
    :func:`binary_target`; the group is ``Instance.group_key``. Choice-matched AUROC is
    computed for ``flip:<judge>`` label sets, stratified by that judge's AB choice.

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark
        Benchmark name.
    label
        Label set name.
    detectors
        Detector names; default every detector with scores on the benchmark.
    slice_field
        Payload field that defines the slices.
    positive
        Explicit positive class of the label set.
    resamples, seed
        Group-bootstrap resamples and root seed (slice ``i`` uses a seed derived from
        ``(seed, i)``).
    cache
        Memo keyed on (benchmark, data_version, label, positive, labels, k, detector, slice
        field, resamples, seed); ``None`` disables it.
    labels, k
        Read the original or the resolved value of the label set (see :func:`load_labelled`).

    Returns
    -------
    (BinaryTarget, list of MetricRow)
        The target rule used and the rows, detector by detector.

    Raises
    ------
    NotFound
        Unknown benchmark, label set or detector.
    InvalidInput
        Label set not binary, bad slice field, resamples, seed, labels or k.

    """
    try:
        resamples = _validate.resample_count(resamples)
        seed = _validate.seed_value(seed)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    bench = get_benchmark(session, benchmark)
    if detectors:
        chosen = [get_detector(session, name) for name in dict.fromkeys(detectors)]
    else:
        chosen = scored_detectors(session, bench)
    # Reading labels is one query; the bootstrap is what the cache saves.
    items = load_labelled(
        session, bench, label, positive=positive, slice_field=slice_field, labels=labels, k=k
    )
    choice = ab_choices(session, items)
    rows: list[MetricRow] = []
    for detector in chosen:

        def compute(detector: Detector = detector) -> tuple[MetricRow, ...]:
            return _detector_rows(session, items, detector, choice, resamples, seed)

        key: Hashable = (
            "metric-rows",
            *data_key(session, bench),
            label,
            items.target.positive,
            *label_key(labels, k),
            detector.id,
            slice_field,
            resamples,
            seed,
        )
        rows.extend(compute() if cache is None else cache.get_or_compute(key, compute))
    return items.target, rows


def metrics_report(
    session: Session,
    benchmark: str,
    label: str = "reference",
    detectors: Sequence[str] | None = None,
    *,
    slice_field: str | None = None,
    positive: str | None = None,
    resamples: int = 2000,
    seed: int = 0,
    labels: LabelMode = "original",
    k: int = 2,
) -> dict[str, Any]:
    """The metric matrix and the judge summaries as one JSON-ready dict (CLI and web).

    Judges are checked against ``label`` when it is an A/B label set (e.g. a corrected
    reference), else against ``reference``. ``labels`` and ``k`` choose the original or the
    resolved labels (see :func:`load_labelled`) for every part of the report alike.

    Returns
    -------
    dict
        ``benchmark``, ``label``, ``labels``, ``k``, ``positive``, ``negative``,
        ``target_rule``, ``slice_field``, ``resamples``, ``seed``, ``data_version``,
        ``rows`` (see :meth:`MetricRow.as_dict`) and ``judges`` (see
        :meth:`app.services.judge_summary.JudgeSummary.as_dict`), ``comparisons`` (paired
        probe-minus-baseline differences) and ``constant_predictors`` (see
        :func:`app.services.comparisons.comparisons_report`).

    """
    target, rows = metric_rows(
        session,
        benchmark,
        label,
        detectors,
        slice_field=slice_field,
        positive=positive,
        resamples=resamples,
        seed=seed,
        labels=labels,
        k=k,
    )
    # Imported here: judge_summary imports this module for data_key.
    from app.services.comparisons import comparisons_report, default_pairs
    from app.services.judge_summary import judge_summaries

    reference = label if (target.positive, target.negative) == KNOWN_TARGETS[0] else "reference"
    judges = judge_summaries(
        session, benchmark, reference=reference, resamples=resamples, seed=seed, labels=labels, k=k
    )
    shown = list(dict.fromkeys(row.detector for row in rows))
    comparisons = comparisons_report(
        session,
        benchmark,
        label,
        default_pairs(shown),
        positive=positive,
        resamples=resamples,
        seed=seed,
        detectors=shown,
        labels=labels,
        k=k,
    )
    return {
        "benchmark": benchmark,
        "label": label,
        "labels": labels,
        "k": k,
        "positive": target.positive,
        "negative": target.negative,
        "target_rule": target.rule,
        "slice_field": slice_field,
        "resamples": resamples,
        "seed": seed,
        "data_version": get_benchmark(session, benchmark).data_version,
        "rows": [row.as_dict() for row in rows],
        "judges": [judge.as_dict() for judge in judges],
        "comparisons": comparisons["pairs"],
        "constant_predictors": comparisons["constant_predictors"],
    }
