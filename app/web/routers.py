"""The two kinds of router: browser pages (left out of ``/openapi.json``) and the JSON API.

Both check the text of every request first (:func:`app.web.params.check_request_text`).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from app.web.error_docs import SIGNED_IN, ApiRoute
from app.web.params import check_request_text

_CHECKS = [Depends(check_request_text)]


def page_router() -> APIRouter:
    """A router of HTML pages and form posts, which the OpenAPI schema leaves out."""
    return APIRouter(include_in_schema=False, dependencies=_CHECKS)


def json_router(tag: str) -> APIRouter:
    """A router of JSON routes under ``/api``, grouped under ``tag`` in the OpenAPI schema.

    Its routes document their error responses (:mod:`app.web.error_docs`).
    """
    return APIRouter(
        prefix="/api",
        tags=[tag],
        dependencies=_CHECKS,
        responses=SIGNED_IN,
        route_class=ApiRoute,
    )
