"""The error responses of the JSON API, declared once for ``/openapi.json``.

Every ``/api`` route needs a signed-in user with a role (401, 403); a route whose path names
something answers 404 when nothing has that name (also for a name no text could be, see
:mod:`app.web.params`); routes that change state in ways a concurrent change can contradict
add :data:`CONFLICT` (409). Routes that refuse a well-typed value for what it means (an unknown
sort field, a judge missing, an item outside the queue) document that 422 with its reasons
(:func:`invalid`), and routes with a body the 400 of one that cannot be parsed (:data:`BAD_BODY`).
"""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute
from pydantic import BaseModel


class ErrorDetail(BaseModel):
    """The body of a 401, 403, 404 or 409 answer."""

    detail: str


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorDetail, "description": description}


SIGNED_IN: dict[int | str, dict[str, Any]] = {
    401: _error("Not signed in: send `Authorization: Bearer <API token>`."),
    403: _error("The user's role does not allow this, or the queue is not assigned to them."),
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: _error("Nothing has the name or id in the path."),
}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: _error("The request contradicts the current state (e.g. a newer version exists)."),
}
BAD_BODY: dict[int | str, dict[str, Any]] = {
    400: _error("The body could not be parsed (e.g. multipart data without a boundary)."),
}
# The largest bootstrap the API computes in one request: cost grows with resamples times
# labelled items, and 100,000 resamples of a small benchmark took 11 s inline.
MAX_RESAMPLES = 10_000
# What a page that computes its bootstrap in the request draws by default (report, judges,
# savings): enough for percentile intervals, quick on a few hundred groups.
PAGE_RESAMPLES = 1000


class InvalidPart(BaseModel):
    """One refused value: where it is (``["query", "sort"]``), why, and the kind of error."""

    loc: list[str | int]
    msg: str
    type: str


class InvalidDetail(BaseModel):
    """The body of a 422: every refused value (FastAPI's shape, for semantic refusals too)."""

    detail: list[InvalidPart]


def invalid(*reasons: str) -> dict[int | str, dict[str, Any]]:
    """A 422 documented with the semantic ``reasons`` a route refuses well-typed values for.

    FastAPI documents a 422 only for values of the wrong type; its description replaces that
    one (the body has the same shape).
    """
    why = "; ".join(reasons)
    description = (
        "A value of the wrong type, or one the route refuses for what it means "
        f"(`detail[].loc` names it): {why}."
    )
    return {422: {"model": InvalidDetail, "description": description}}


class ApiRoute(APIRoute):
    """An API route documenting :data:`NOT_FOUND` when its path names something."""

    def __init__(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        if "{" in path:
            kwargs["responses"] = {**NOT_FOUND, **(kwargs.get("responses") or {})}
        super().__init__(path, endpoint, **kwargs)
