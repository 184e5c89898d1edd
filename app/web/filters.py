"""Instance-table filters as query parameters: parsing (one dependency) and canonical URLs.

Every view of the table lives in its URL; the same parameters drive the HTML page, its htmx
fragment and the JSON API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Query
from pydantic import BeforeValidator, FiniteFloat

from app.services.table.filter_query import filter_from_params
from app.services.table.instance_filter import FlipState, InstanceFilter
from app.services.table.instance_sort import SORT_HELP, TableSort
from app.tables import Choice


def _blank_to_none(value: Any) -> Any:
    # HTML forms send empty inputs as "", which means "no condition".
    return None if isinstance(value, str) and value.strip() == "" else value


Blank = BeforeValidator(_blank_to_none)


def _optional(kind: Any, description: str) -> Any:
    """An optional query parameter of ``kind`` for which a blank input means none."""
    return Annotated[kind | None, Blank, Query(description=description)]


JudgeParam = _optional(str, "Judge that `ab`, `ba` and `flip` refer to.")
AbParam = _optional(Choice, "The judge's choice with A shown first.")
BaParam = _optional(Choice, "The judge's choice with B shown first.")
FlipParam = _optional(
    FlipState,
    "Whether the two orders chose different responses; `none`: the pair was not retained (an "
    "order is invalid).",
)
ScoreDetectorParam = _optional(str, "Detector that the score range refers to.")
# Finite (blank: no bound): nan, inf and 1e309 are a 422 naming it (the page answered 500).
ScoreMinParam = _optional(FiniteFloat, "Lowest score kept (inclusive).")
ScoreMaxParam = _optional(FiniteFloat, "Highest score kept (inclusive).")


async def instance_filter(
    q: Annotated[
        str, Query(description="Text in the external id, group or any payload field.")
    ] = "",
    label: Annotated[
        list[str] | None,
        Query(
            description="Current label value, `NAME=VALUE` (repeatable); `NAME=` selects "
            "instances without a current value. Example: `reference=A`."
        ),
    ] = None,
    slice: Annotated[
        list[str] | None,
        Query(description="Payload slice field value, `FIELD=VALUE` (repeatable)."),
    ] = None,
    judge: JudgeParam = None,
    ab: AbParam = None,
    ba: BaParam = None,
    flip: FlipParam = None,
    score_detector: ScoreDetectorParam = None,
    score_min: ScoreMinParam = None,
    score_max: ScoreMaxParam = None,
) -> InstanceFilter:
    """Parse the table's query parameters into an unchecked :class:`InstanceFilter`.

    ``async`` only so that FastAPI calls it on the event loop instead of the thread pool; it
    does no I/O.

    Returns
    -------
    InstanceFilter
        Names are checked against the benchmark later, by the service.

    Raises
    ------
    InvalidInput
        A ``label`` or ``slice`` entry without ``=``.

    """
    return filter_from_params(
        q=q,
        label=label,
        slice=slice,
        judge=judge,
        ab=ab,
        ba=ba,
        flip=flip,
        score_detector=score_detector,
        score_min=score_min,
        score_max=score_max,
    )


async def table_sort(
    sort: Annotated[str | None, Query(description=SORT_HELP, max_length=400)] = None,
) -> TableSort:
    """Parse the table's ``sort`` parameter (InvalidInput on an unknown field)."""
    return TableSort.parse(sort)


ColsParam = Annotated[
    list[str] | None,
    Query(
        description="The columns shown (repeatable; the column chooser's keys: `group`, "
        "`slice:FIELD`, `text`, `label:SET`, `judge:JUDGE`, `score:DETECTOR`). Absent: every "
        "column; one blank value: only the external id. The column sorted by always shows; "
        "unknown keys are ignored.",
    ),
]


async def column_choice(cols: ColsParam = None) -> tuple[str, ...] | None:
    """The ``cols`` parameter as the chosen columns, in order (``None``: no choice, all show).

    ``async``: no I/O. Blank values only say that the parameter is present; repeats count once.
    """
    if cols is None:
        return None
    return tuple(dict.fromkeys(c for c in cols if c.strip()))


def _number(x: float) -> str:
    return repr(int(x)) if x == int(x) and abs(x) < 1e15 else repr(x)


def filter_params(flt: InstanceFilter) -> list[tuple[str, str]]:
    """The query parameters that reproduce ``flt``, in a fixed order, blanks left out."""
    params: list[tuple[str, str]] = []
    if flt.q:
        params.append(("q", flt.q))
    params += [("label", f"{c.name}={c.value or ''}") for c in flt.labels]
    params += [("slice", f"{c.field}={c.value}") for c in flt.slices]
    if flt.judge is not None:
        params.append(("judge", flt.judge))
    for key in ("ab", "ba", "flip"):
        value = getattr(flt, key)
        if value is not None:
            params.append((key, value.value))
    if flt.score_detector is not None:
        params.append(("score_detector", flt.score_detector))
    if flt.score_min is not None:
        params.append(("score_min", _number(flt.score_min)))
    if flt.score_max is not None:
        params.append(("score_max", _number(flt.score_max)))
    return params


def query_string(flt: InstanceFilter, **extra: int | str | Sequence[str] | None) -> str:
    """``?...`` for ``flt`` plus ``extra`` parameters (``None`` and page 1 left out), or ``""``.

    A list value repeats its key once per item (``cols``).
    """
    params = filter_params(flt)
    for key, value in extra.items():
        if value is None or (key == "page" and value == 1):
            continue
        if isinstance(value, list | tuple):
            params += [(key, str(v)) for v in value]
        else:
            params.append((key, str(value)))
    return "?" + urlencode(params) if params else ""
