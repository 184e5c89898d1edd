"""Map domain and HTTP errors to responses: JSON under ``/api``, an HTML page elsewhere.

htmx requests get the page's error fragment, whose title and items ``static/app.js`` shows in
the error region of every page.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, RedirectResponse, Response

from app.errors import Conflict, InvalidInput, NotFound
from app.services.review.queues import NotAssigned
from app.web.auth import Forbidden, NotSignedIn, sign_in_url
from app.web.templating import render


def _wants_json(request: Request) -> bool:
    path = request.url.path
    return path == "/api" or path.startswith("/api/") or path in ("/healthz", "/openapi.json")


def _html_error(request: Request, status: int, title: str, messages: list[str]) -> Response:
    # A bad filter keeps its page: offer the same path without the query string.
    clear = request.url.path if status == 422 else None
    return render(
        request,
        "error.html",
        {"status": status, "title": title, "messages": messages, "clear_url": clear},
        fragment="_error.html",
        status_code=status,
    )


def _not_found(request: Request, exc: Exception) -> Response:
    if _wants_json(request):
        return JSONResponse({"detail": str(exc)}, status_code=404)
    return _html_error(request, 404, "Not found", [str(exc)])


def _conflict(request: Request, exc: Exception) -> Response:
    if _wants_json(request):
        return JSONResponse({"detail": str(exc)}, status_code=409)
    return _html_error(request, 409, "Conflict", [str(exc)])


def _invalid_input(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidInput)
    if _wants_json(request):
        detail = [
            {
                "loc": [_where(request), exc.field] if exc.field else [_where(request)],
                "msg": exc.reason,
                "type": "invalid_filter",
            }
        ]
        return JSONResponse({"detail": detail}, status_code=422)
    title = "Invalid filter" if request.method == "GET" else "Invalid input"
    return _html_error(request, 422, title, [exc.message])


def _where(request: Request) -> str:
    return "query" if request.method == "GET" else "body"


def _finite(value: Any) -> Any:
    """``value`` with NaN and the infinities spelled as text (``'nan'``, ``'-inf'``).

    Python's JSON parser reads the non-standard ``NaN`` and ``Infinity`` of a request body, and
    a 422 echoes the invalid input back, which JSON cannot write: the answer would be a 500.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    if _wants_json(request):
        # FastAPI's own answer, less the numbers JSON cannot write.
        detail = _finite(jsonable_encoder(exc.errors()))
        return JSONResponse({"detail": detail}, status_code=422)
    messages = [_describe(err) for err in exc.errors()]
    return _html_error(request, 422, "Invalid request", messages)


def _describe(err: dict[str, Any]) -> str:
    loc = [str(x) for x in err.get("loc", ()) if x not in ("query", "path")]
    value = err.get("input")
    where = ".".join(loc) or "request"
    return f"{where}: {err.get('msg', 'invalid')}" + (f" (got {value!r})" if value else "")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if _wants_json(request) or exc.status_code < 400:
        return await http_exception_handler(request, exc)
    title = "Not found" if exc.status_code == 404 else "Error"
    return _html_error(request, exc.status_code, title, [str(exc.detail)])


def _not_signed_in(request: Request, exc: Exception) -> Response:
    if _wants_json(request):
        return JSONResponse(
            {"detail": "sign in: send Authorization: Bearer <API token>"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    target = sign_in_url(request) if request.method == "GET" else "/login"
    if request.headers.get("HX-Request") == "true":
        # htmx would swap a redirect's target into the page; send the whole window there.
        return Response(status_code=401, headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)


def _forbidden(request: Request, exc: Exception) -> Response:
    # A missing role or CSRF token (web layer), or a queue one is not assigned to (service).
    assert isinstance(exc, Forbidden | NotAssigned)
    if _wants_json(request):
        return JSONResponse({"detail": exc.message}, status_code=403)
    return _html_error(request, 403, "Forbidden", [exc.message])


def _server_error(request: Request, exc: Exception) -> Response:
    # Anything unexpected: the details go to the server's log (the exception is re-raised
    # after this answer), the page or htmx's error region gets a readable sentence.
    message = "The server failed on this request; its log has the details."
    if _wants_json(request):
        return JSONResponse({"detail": message}, status_code=500)
    return _html_error(request, 500, "Server error", [message])


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(NotSignedIn, _not_signed_in)
    app.add_exception_handler(Forbidden, _forbidden)
    app.add_exception_handler(NotAssigned, _forbidden)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(InvalidInput, _invalid_input)
    app.add_exception_handler(Conflict, _conflict)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _server_error)
