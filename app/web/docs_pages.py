"""``/docs`` and ``/openapi.json``: the API description, behind sign-in like every other page.

FastAPI's own docs route loads Swagger UI from a CDN (a blank page offline) and both of its
routes answer without sign-in; these serve the vendored copy under ``static/vendor/swagger-ui``
and the same schema to signed-in reviewers only (``app.main`` adds the role check).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.responses import HTMLResponse, JSONResponse

from app.web.routers import page_router
from app.web.templating import SECURITY_HEADERS, render

router = page_router()

OPENAPI_PATH = "/openapi.json"


@router.get("/docs")
def docs_page(request: Request) -> HTMLResponse:
    """Swagger UI over ``/openapi.json``, from the vendored assets."""
    return render(request, "docs.html", {"openapi_url": OPENAPI_PATH})


@router.get(OPENAPI_PATH)
def openapi_schema(request: Request) -> JSONResponse:
    """The OpenAPI description of the JSON API (FastAPI builds it once and keeps it)."""
    schema: dict[str, Any] = request.app.openapi()
    return JSONResponse(schema, headers=SECURITY_HEADERS)
