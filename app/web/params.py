"""What every request's parameters must be, checked once where they enter.

Text: :func:`check_request_text` (a dependency of every page and API router, see
:mod:`app.web.routers`) refuses a NUL character (PostgreSQL's text and JSONB cannot hold one) or
a lone surrogate (no UTF-8 encoder writes one: SQLite stores it and every later read fails) in
any path segment, query parameter, form field or JSON body value or key, before the route and
its validation run, so both databases answer the same: 422, or 404 for a path, which then names
something that cannot exist. Routes reading ``request.query_params`` themselves are covered too.

Integers: ids and counts are bounded by the column type they meet (PostgreSQL's 4-byte
``INTEGER``, the type of every id) through :data:`DbId` and :data:`DbCount`, so an id past it is
a 422, not an overflow in the driver.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from annotated_types import Ge, Le
from fastapi import Query, Request
from fastapi.exceptions import RequestValidationError

from app.errors import NotFound
from app.sql.json_paths import nesting_depth
from app.sql.storable import MAX_NESTING, find_unstorable, printable, unstorable

DB_INT_MAX = 2**31 - 1
"""The largest value of an ``INTEGER`` column on PostgreSQL (and so of any id)."""
DbId = Annotated[int, Ge(1), Le(DB_INT_MAX)]
"""A row id, in a path or a body."""
DbCount = Annotated[int, Ge(0), Le(DB_INT_MAX)]
"""A non-negative integer that is stored, compared with a column or passed to a job."""
DbInt = Annotated[int, Ge(-DB_INT_MAX - 1), Le(DB_INT_MAX)]
"""Any integer an ``INTEGER`` column holds (a job parameter whose sign its class checks)."""

Page = Annotated[int, Query(ge=1, le=10_000_000, description="1-based page number.")]
"""A page number in a query string (of a table or a list shown a page at a time)."""

_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _refused(loc: tuple[str, ...], reason: str, value: str | None = None) -> RequestValidationError:
    error: dict[str, Any] = {"type": "string_unstorable", "loc": loc, "msg": reason}
    if value is not None:
        error["input"] = printable(value)
    return RequestValidationError([error])


def _check_pairs(where: str, pairs: list[tuple[str, Any]]) -> None:
    for name, value in pairs:
        for text in (name, value):
            if isinstance(text, str) and (reason := unstorable(text)):
                shown = value if isinstance(value, str) else None
                raise _refused((where, printable(name)), reason, shown)


def _check_json(body: bytes) -> None:
    # NUL and surrogates come only from \u escapes; most bodies hold none and skip the parse.
    if b"\\u" not in body:
        return
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return  # FastAPI has answered malformed JSON already; nothing of it reaches a route
    if nesting_depth(data, MAX_NESTING) > MAX_NESTING:
        raise _refused(("body",), f"nested deeper than {MAX_NESTING} levels")
    if found := find_unstorable(data):
        raise _refused(("body", found[0]), found[1])


async def check_request_text(request: Request) -> None:
    """Refuse a request carrying text the store cannot hold (see the module docstring).

    Raises
    ------
    NotFound
        For a path parameter: nothing can be named so.
    RequestValidationError
        For a query parameter, a form field or a JSON body value or key (422).

    """
    for name, value in request.path_params.items():
        if isinstance(value, str) and (reason := unstorable(value)):
            raise NotFound(f"{reason}: nothing is named so", field=name)
    _check_pairs("query", request.query_params.multi_items())
    content_type = request.headers.get("content-type", "")
    if request.method in ("GET", "HEAD"):
        return
    if content_type.startswith(_FORM_TYPES):
        # Starlette keeps the parsed form: the route's Form() parameters read the same one.
        _check_pairs("body", (await request.form()).multi_items())
    elif "json" in content_type:
        _check_json(await request.body())
