"""The error responses of the JSON API, declared once for ``/openapi.json``.

Every ``/api`` route needs a signed-in user with a role (401, 403); a route whose path names
something answers 404 when nothing has that name (also for a name no text could be, see
:mod:`app.web.params`); routes that change state in ways a concurrent change can contradict
add :data:`CONFLICT` (409).
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


class ApiRoute(APIRoute):
    """An API route documenting :data:`NOT_FOUND` when its path names something."""

    def __init__(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        if "{" in path:
            kwargs["responses"] = {**NOT_FOUND, **(kwargs.get("responses") or {})}
        super().__init__(path, endpoint, **kwargs)
