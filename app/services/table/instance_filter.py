"""The instance-table filter: what a reviewer can narrow a benchmark to, checked and as SQL."""

from __future__ import annotations

import enum
import functools
import math

from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, Select, exists, select, text
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.labels import current_label_subquery, is_latest_original
from app.services.evidence.payload_fields import SLICE_FIELDS, payload_text, text_search
from app.services.table.facets import BenchmarkFacets
from app.tables import Choice, Instance, Judgment, LabelEvent, Order, Score

MAX_SEARCH_LENGTH = 200


class FlipState(enum.StrEnum):
    """Whether the judge's two orders chose different identities (``none``: pair not retained)."""

    yes = "yes"
    no = "no"
    none = "none"


_FLIP_VALUE = {FlipState.yes: "1", FlipState.no: "0", FlipState.none: None}


class LabelCondition(BaseModel):
    """Current value of label set ``name`` equals ``value`` (``None``: has no current value)."""

    model_config = ConfigDict(frozen=True)

    name: str
    value: str | None


class SliceCondition(BaseModel):
    """Payload slice field ``field`` equals ``value``."""

    model_config = ConfigDict(frozen=True)

    field: str
    value: str


class InstanceFilter(BaseModel):
    """All conditions of one view of the instance table; every condition must hold.

    ``judge`` names the judge that ``ab``, ``ba`` and ``flip`` refer to, ``score_detector``
    the detector that ``score_min``/``score_max`` (inclusive) refer to. Hashable, so it can key
    a cache once resolved.
    """

    model_config = ConfigDict(frozen=True)

    q: str = ""
    labels: tuple[LabelCondition, ...] = ()
    slices: tuple[SliceCondition, ...] = ()
    judge: str | None = None
    ab: Choice | None = None
    ba: Choice | None = None
    flip: FlipState | None = None
    score_detector: str | None = None
    score_min: float | None = None
    score_max: float | None = None

    @property
    def is_empty(self) -> bool:
        """Whether the filter keeps every instance."""
        return self == InstanceFilter()

    def label_choices(self) -> dict[str, str]:
        """``{label set: "NAME=VALUE"}`` of the label conditions, as the filter form writes them."""
        return {c.name: f"{c.name}={c.value or ''}" for c in self.labels}

    def slice_choices(self) -> dict[str, str]:
        """``{field: "FIELD=VALUE"}`` of the slice conditions, as the filter form writes them."""
        return {c.field: f"{c.field}={c.value}" for c in self.slices}

    @property
    def uses_judge(self) -> bool:
        """Whether a judge condition is set."""
        return self.ab is not None or self.ba is not None or self.flip is not None

    @property
    def uses_score(self) -> bool:
        """Whether a score range is set."""
        return self.score_min is not None or self.score_max is not None


def resolve_filter(facets: BenchmarkFacets, flt: InstanceFilter) -> InstanceFilter:
    """Check ``flt`` against the benchmark and return its canonical form.

    The canonical form names the judge and the score detector explicitly (the first one
    when only conditions were given), drops names that no condition uses, and sorts and
    de-duplicates repeated conditions, so equal views get equal filters and equal URLs.

    Parameters
    ----------
    facets : BenchmarkFacets
        The benchmark's label sets, judges and scored detectors.
    flt : InstanceFilter
        The filter as parsed from a request.

    Returns
    -------
    InstanceFilter
        The canonical filter.

    Raises
    ------
    InvalidInput
        Unknown label set, slice field, judge or detector, an inverted score range or an
        overlong search, with the offending query parameter as ``field``.

    """
    q = flt.q.strip()
    if len(q) > MAX_SEARCH_LENGTH:
        raise InvalidInput(f"at most {MAX_SEARCH_LENGTH} characters", field="q")
    known_labels = [s.name for s in facets.label_sets]
    for cond in flt.labels:
        if cond.name not in known_labels:
            raise InvalidInput(
                f"unknown label set {cond.name!r}; known: {', '.join(known_labels) or 'none'}",
                field="label",
            )
    for sc in flt.slices:
        if sc.field not in SLICE_FIELDS:
            raise InvalidInput(
                f"unknown slice field {sc.field!r}; known: {', '.join(SLICE_FIELDS)}",
                field="slice",
            )
    judge = None
    if flt.uses_judge:
        judge = _pick(flt.judge, [j.name for j in facets.judges], "judge", "judge")
    elif flt.judge is not None and facets.judge(flt.judge) is None:
        raise InvalidInput(f"no judge {flt.judge!r} on this benchmark", field="judge")
    detector = None
    if flt.uses_score:
        names = [d.name for d in facets.scored_detectors]
        detector = _pick(flt.score_detector, names, "scored detector", "score_detector")
        for name in ("score_min", "score_max"):
            # nan compares false with everything and inf/1e309 reach the database as text
            # it refuses: a bound is a finite number, whichever way the filter came in.
            bound = getattr(flt, name)
            if bound is not None and not math.isfinite(bound):
                raise InvalidInput(f"{name} must be a finite number, got {bound!r}", field=name)
        if (
            flt.score_min is not None
            and flt.score_max is not None
            and flt.score_min > flt.score_max
        ):
            raise InvalidInput("score_min is greater than score_max", field="score_min")
    elif flt.score_detector is not None and facets.scored_detector(flt.score_detector) is None:
        raise InvalidInput(
            f"no scored detector {flt.score_detector!r} on this benchmark", field="score_detector"
        )
    return InstanceFilter(
        q=q,
        labels=tuple(sorted(set(flt.labels), key=lambda c: (c.name, c.value is None, c.value))),
        slices=tuple(sorted(set(flt.slices), key=lambda c: (c.field, c.value))),
        judge=judge,
        ab=flt.ab,
        ba=flt.ba,
        flip=flt.flip,
        score_detector=detector,
        score_min=flt.score_min,
        score_max=flt.score_max,
    )


def _pick(name: str | None, known: list[str], what: str, field: str) -> str:
    if name is None:
        if not known:
            raise InvalidInput(f"this benchmark has no {what}", field=field)
        return known[0]
    if name not in known:
        raise InvalidInput(
            f"no {what} {name!r} on this benchmark; known: {', '.join(known) or 'none'}",
            field=field,
        )
    return name


def _holding_current_value(name: str, value: str | None) -> Select[tuple[int]]:
    """Ids of instances whose current value of ``name`` is ``value`` (any value if ``None``)."""
    q = select(LabelEvent.instance_id).where(LabelEvent.label_name == name, is_latest_original())
    return q.where(LabelEvent.value.is_not(None) if value is None else LabelEvent.value == value)


def _label_condition(cond: LabelCondition, counting: bool) -> ColumnElement[bool]:
    if counting:
        held = _holding_current_value(cond.name, cond.value)
        return Instance.id.not_in(held) if cond.value is None else Instance.id.in_(held)
    current = current_label_subquery(cond.name)
    return current.is_(None) if cond.value is None else current == cond.value


def _choice_condition(
    judge_id: int, order: Order, choice: Choice, counting: bool
) -> ColumnElement[bool]:
    match = (
        Judgment.instance_id == Instance.id,
        Judgment.detector_id == judge_id,
        Judgment.order == order.value,
    )
    if counting:
        return exists().where(*match, Judgment.choice == choice.value)
    # (detector, instance, order) is unique: a scalar lookup per row.
    return select(Judgment.choice).where(*match).scalar_subquery() == choice.value


def _score_condition(
    detector_id: int, lo: float | None, hi: float | None, counting: bool
) -> ColumnElement[bool]:
    match = (Score.instance_id == Instance.id, Score.detector_id == detector_id)
    if counting:
        bounds = [Score.score >= lo] if lo is not None else []
        bounds += [Score.score <= hi] if hi is not None else []
        return exists().where(*match, *bounds)
    # (detector, instance) is unique: a scalar lookup per row.
    score = select(Score.score).where(*match).scalar_subquery()
    if lo is not None and hi is not None:
        return score.between(lo, hi)
    return score >= lo if lo is not None else score <= hi


def filter_conditions(
    facets: BenchmarkFacets, flt: InstanceFilter, dialect: str, *, counting: bool = False
) -> list[ColumnElement[bool]]:
    """SQL conditions on ``Instance`` for a resolved filter (the benchmark condition included).

    Two shapes select the same rows. For reading a page (``counting=False``) every
    condition is a per-row lookup, so the scan can walk the (benchmark, external id) index
    in page order and stop after one page; a semi-join there would let PostgreSQL start
    from the condition's table and sort everything instead. For counting every match
    (``counting=True``) conditions are set-based (``IN``/``EXISTS``), which PostgreSQL hashes
    in one pass over each table, 3-5x faster than a lookup per instance.

    Parameters
    ----------
    facets : BenchmarkFacets
        The benchmark (for its id and detector ids).
    flt : InstanceFilter
        A filter returned by :func:`resolve_filter`.
    dialect : str
        ``sqlite`` or ``postgresql``.
    counting : bool
        The shape: set-based for counting, per-row for reading a page in order.

    Returns
    -------
    list of ColumnElement
        Conditions to AND together.

    """
    judge = None
    if flt.judge is not None:
        found = facets.judge(flt.judge)
        assert found is not None, "resolve_filter checks the judge"
        judge = (found.id, found.name)
    detector_id = None
    if flt.score_detector is not None and flt.uses_score:
        det = facets.scored_detector(flt.score_detector)
        assert det is not None, "resolve_filter checks the detector"
        detector_id = det.id
    return list(_conditions(facets.id, judge, detector_id, flt, dialect, counting))


@functools.lru_cache(maxsize=256)
def _conditions(
    bench_id: int,
    judge: tuple[int, str] | None,
    detector_id: int | None,
    flt: InstanceFilter,
    dialect: str,
    counting: bool,
) -> tuple[ColumnElement[bool], ...]:
    # Memoised on everything they depend on: building them took a quarter of a millisecond
    # per filtered page, and SQL expressions are immutable, so threads can share them.
    conds: list[ColumnElement[bool]] = [Instance.benchmark_id == bench_id]
    if flt.q:
        conds.append(text_search(dialect, flt.q))
    for sc in flt.slices:
        conds.append(payload_text(dialect, sc.field) == sc.value)
    labels = list(flt.labels)
    if judge is not None:
        judge_id, judge_name = judge
        for order, choice in ((Order.AB, flt.ab), (Order.BA, flt.ba)):
            if choice is not None:
                conds.append(_choice_condition(judge_id, order, choice, counting))
        if flt.flip is not None:
            labels.append(LabelCondition(name=f"flip:{judge_name}", value=_FLIP_VALUE[flt.flip]))
    conds += [_label_condition(cond, counting) for cond in labels]
    if detector_id is not None:
        conds.append(_score_condition(detector_id, flt.score_min, flt.score_max, counting))
    return tuple(conds)


def plan_for_one_page(session: Session) -> None:
    """Make PostgreSQL plan the next ordered, limited reads as the page lookups they are.

    Per-row filter conditions get default selectivities (0.5% each), so with two or three
    of them PostgreSQL expects almost no matches: it prefers to filter every row and sort,
    which runs the lookups for all 100,000 instances instead of a page's worth, and the
    inflated cost estimate triggers JIT compilation (about 150 ms to run a 3 ms query).
    Walking the index is never much worse (both read every row when matches are rare), so
    sorting and JIT are switched off for the rest of this read transaction. SQLite already
    walks the index for ``ORDER BY ... LIMIT``.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SET LOCAL enable_sort = off"))
        session.execute(text("SET LOCAL jit = off"))
