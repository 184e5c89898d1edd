"""Where the browser goes after a POST: one response for htmx and plain forms alike."""

from __future__ import annotations

from fastapi import Request
from starlette.responses import RedirectResponse, Response

from app.web.templating import is_fragment_request


def redirect_after_post(request: Request, url: str) -> Response:
    """Send the browser to ``url`` after a POST (post/redirect/get).

    htmx would follow a redirect inside its XHR and swap the target page into the current
    one, so an htmx request gets ``204`` with ``HX-Redirect`` (htmx then loads ``url`` as a
    whole page); a plain form gets a ``303 See Other``.
    """
    if is_fragment_request(request):
        return Response(status_code=204, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)
