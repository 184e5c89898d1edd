"""The two kinds of router: browser pages (left out of ``/openapi.json``) and the JSON API."""

from __future__ import annotations

from fastapi import APIRouter


def page_router() -> APIRouter:
    """A router of HTML pages and form posts, which the OpenAPI schema leaves out."""
    return APIRouter(include_in_schema=False)


def json_router(tag: str) -> APIRouter:
    """A router of JSON routes under ``/api``, grouped under ``tag`` in the OpenAPI schema."""
    return APIRouter(prefix="/api", tags=[tag])
