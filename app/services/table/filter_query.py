"""The instance table's query parameters parsed into an :class:`InstanceFilter`, in one place.

The web page's dependency, ``appellate export --filter``, queue sources and the defect report
all read a table view through :func:`filter_from_params` (typed or raw values) or
:func:`parse_filter_query` (a pasted URL or query string), so a link copied from the dashboard
selects exactly the rows that page lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs

from pydantic import ValidationError

from app.errors import InvalidInput
from app.services.table.instance_filter import InstanceFilter, LabelCondition, SliceCondition
from app.sql.storable import printable, unstorable

__all__ = [
    "FILTER_LIST_PARAMS",
    "FILTER_SCALAR_PARAMS",
    "filter_from_params",
    "parse_filter_query",
]

FILTER_LIST_PARAMS: tuple[str, ...] = ("label", "slice")
"""Repeatable parameters: ``label=NAME=VALUE`` and ``slice=FIELD=VALUE``."""
FILTER_SCALAR_PARAMS: tuple[str, ...] = (
    "q",
    "judge",
    "ab",
    "ba",
    "flip",
    "score_detector",
    "score_min",
    "score_max",
)
"""Single-valued parameters; a repeated one keeps its last value, as the page does."""
# Page numbers may come along in a pasted URL; they choose a page, not rows.
_PAGING_PARAMS = ("page", "page_size")


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _split(raw: str, param: str) -> tuple[str, str]:
    # Split at the first "=": label names come from `--label NAME=COL` and cannot contain
    # one, while values (e.g. "A=B") can.
    name, sep, value = raw.partition("=")
    if not sep or not name:
        raise InvalidInput(f"expected NAME=VALUE, got {raw!r}", field=param)
    return name, value


def filter_from_params(
    *,
    label: Sequence[str] | None = None,
    slice: Sequence[str] | None = None,
    **scalars: Any,
) -> InstanceFilter:
    """An unchecked :class:`InstanceFilter` from the table's parameters.

    Parameters
    ----------
    label, slice : sequence of str, optional
        ``NAME=VALUE`` / ``FIELD=VALUE`` entries; blank entries are skipped, and ``NAME=``
        selects instances without a current value of that label set.
    **scalars
        Any of :data:`FILTER_SCALAR_PARAMS`, typed or as strings; blank values mean "no
        condition".

    Returns
    -------
    InstanceFilter
        Names are checked against the benchmark later, by
        :func:`~app.services.table.instance_filter.resolve_filter`.

    Raises
    ------
    InvalidInput
        An unknown parameter, an entry without ``=``, or a value of the wrong type (the
        parameter is the error's ``field``).

    """
    unknown = sorted(set(scalars) - set(FILTER_SCALAR_PARAMS))
    if unknown:
        raise InvalidInput(f"unknown filter parameter(s): {', '.join(unknown)}", field=unknown[0])
    labels = []
    for raw in label or []:
        if not _blank(raw):
            name, value = _split(raw, "label")
            labels.append(LabelCondition(name=name, value=value or None))
    slices = []
    for raw in slice or []:
        if not _blank(raw):
            field, value = _split(raw, "slice")
            slices.append(SliceCondition(field=field, value=value))
    # The search text is kept as typed; any other blank value means "no condition".
    given = {k: v for k, v in scalars.items() if not _blank(v) or (k == "q" and v is not None)}
    try:
        return InstanceFilter(labels=tuple(labels), slices=tuple(slices), **given)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"])
        raise InvalidInput(f"{param}: {err['msg']}", field=param) from None


def parse_filter_query(query: str) -> InstanceFilter:
    """The filter of a table view given as its URL, or only the query string after ``?``.

    Parameters
    ----------
    query : str
        ``https://.../benchmarks/NAME?label=reference%3DA&flip=yes`` or
        ``label=reference=A&flip=yes``.

    Returns
    -------
    InstanceFilter
        Unchecked (see :func:`filter_from_params`).

    Raises
    ------
    InvalidInput
        An unknown parameter or a value the page would refuse.

    """
    return filter_from_mapping(parse_query(query))


def parse_query(query: str, *, keep_blank: bool = True) -> dict[str, list[str]]:
    """The parameters of a URL or query string, each decoded value checked like a request's.

    A filter passed inside a parameter (an export's, a changelog's, a new queue's) is decoded
    a second time here: ``%2500`` arrives as ``%00`` and becomes a NUL character only now, after
    the request's own text was checked, so the check is repeated on what decoding gives.

    Raises
    ------
    InvalidInput
        A name or value that cannot be stored (a NUL character, a lone surrogate).

    """
    params = parse_qs(query.rpartition("?")[2], keep_blank_values=keep_blank)
    for name, values in params.items():
        for text in (name, *values):
            if reason := unstorable(text):
                raise InvalidInput(f"{printable(name)}: {reason}", field=printable(name))
    return params


def filter_from_mapping(params: Mapping[str, Sequence[str]]) -> InstanceFilter:
    """The filter of parsed query parameters ``{name: [values]}`` (paging ones ignored)."""
    known = {*FILTER_LIST_PARAMS, *FILTER_SCALAR_PARAMS, *_PAGING_PARAMS}
    unknown = sorted(set(params) - known)
    if unknown:
        raise InvalidInput(f"unknown filter parameter(s): {', '.join(unknown)}", field=unknown[0])
    scalars: dict[str, str] = {}
    for name in FILTER_SCALAR_PARAMS:
        values = [v for v in params.get(name, []) if not _blank(v)]
        if values:
            scalars[name] = values[-1]
    return filter_from_params(label=params.get("label"), slice=params.get("slice"), **scalars)
