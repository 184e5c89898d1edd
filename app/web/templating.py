"""Jinja2 environment (autoescaping always on) and the helper that renders a page or fragment."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates
from jinja2 import BytecodeCache, Environment, FileSystemLoader, StrictUndefined, pass_context
from jinja2.bccache import Bucket
from markupsafe import Markup, escape
from starlette.responses import HTMLResponse

from app.services.jobs import kinds
from app.services.jobs.timing import job_timing
from app.services.metrics.metric_matrix import HEADLINE_METRICS, MATRIX_METRICS
from app.stats.bootstrap import TOO_FEW_GROUPS
from app.web import cells, urls
from app.web.filters import query_string
from app.web.markdown import render_markdown

ROOT = Path(__file__).resolve().parent.parent.parent
TEMPLATES_DIR = ROOT / "templates"
STATIC_DIR = ROOT / "static"

# Model outputs are untrusted HTML: no inline scripts, no foreign origins, no plugins.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # One URL answers with a page or a fragment depending on HX-Request.
    "Vary": "HX-Request",
}


def fmt_number(value: float | int | None, digits: int = 3) -> str:
    """A score or count for a table cell: fixed decimals for floats, thousands separators."""
    if value is None:
        return ""
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value):
        return "NaN"
    return f"{value:,.{digits}f}"


def fmt_score(value: float | None) -> Markup:
    """The ``score`` filter: a score, probability or confidence as every page shows it.

    Three decimals (three significant digits below 0.0005) with the full value in the title;
    a muted dot when there is none. The instance table's cells use the same text
    (:func:`app.web.cells.score_text`).
    """
    return cells.score_markup(None if value is None else float(value))


def fmt_ci(ci: list[float] | None, digits: int = 3) -> str:
    """``[low, high]`` as ``"[0.673, 0.773]"``, every interval's one format; ``""`` when absent."""
    if not ci:
        return ""
    low, high = ci
    if not (math.isfinite(low) and math.isfinite(high)):
        return ""
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def interval(ci: list[float] | None, reason: str | None = None) -> Markup:
    """An interval as every page shows it: ``[low, high]``, or why there is none.

    Parameters
    ----------
    ci : list of float or None
        ``[low, high]``, or None.
    reason : str, optional
        Why ``ci`` is None (``app.stats.bootstrap.too_few_groups``); shown as "too few
        groups for an interval" with the counts on hover.

    Returns
    -------
    Markup
        A ``<span class="ci">``, or nothing when there is neither an interval nor a reason.

    """
    text = fmt_ci(ci)
    if text:
        return Markup('<span class="ci">{}</span>').format(text)
    if reason:
        return Markup('<span class="ci no-interval" title="{}">{}</span>').format(
            reason, TOO_FEW_GROUPS
        )
    return Markup("")


@pass_context
def csrf_field(context: Any) -> Markup:
    """The hidden CSRF input every POST form carries (the session's token, escaped)."""
    token = context.get("login_csrf") or context.get("csrf_token", "")
    return Markup('<input type="hidden" name="csrf_token" value="{}">').format(escape(token))


# Functions templates call, under their own names.
_HELPERS = (
    urls.benchmark_url,
    urls.instance_url,
    urls.api_instances_url,
    urls.metrics_url,
    urls.disagreements_url,
    urls.judge_form_url,
    urls.job_link_url,
    kinds.describe_job,
    job_timing,
    fmt_ci,
    interval,
    query_string,
    csrf_field,
)


class ProcessBytecodeCache(BytecodeCache):
    """Compiled templates kept in memory for the life of the process.

    Every app built in one process (each uvicorn worker builds one; the tests build one per
    test) would otherwise compile every template again: 0.4 s of CPU per app. Jinja checks a
    kept entry against the template source's checksum, so an edited template is compiled anew.
    """

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def load_bytecode(self, bucket: Bucket) -> None:
        """Fill ``bucket`` from the kept entry of its template, if any."""
        with self._lock:
            code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: Bucket) -> None:
        """Keep the bytecode ``bucket`` was just compiled to."""
        code = bucket.bytecode_to_string()
        with self._lock:
            self._code[bucket.key] = code


_BYTECODE = ProcessBytecodeCache()


def make_templates(directory: Path = TEMPLATES_DIR) -> Jinja2Templates:
    """The template set, with autoescaping forced on for every template (never ``|safe``)."""
    env = Environment(
        loader=FileSystemLoader(directory),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        bytecode_cache=_BYTECODE,
    )
    env.filters["num"] = fmt_number
    env.filters["score"] = fmt_score
    env.filters["markdown"] = render_markdown
    env.filters["segment"] = urls.path_segment
    env.filters.update(cells.FILTERS)
    env.globals.update(cells.GLOBALS)
    env.globals.update({helper.__name__: helper for helper in _HELPERS})
    # The metric registry's columns, for every metric table (matrix, queue, report).
    env.globals.update(matrix_metrics=MATRIX_METRICS, headline_metrics=HEADLINE_METRICS)
    return Jinja2Templates(env=env)


def is_fragment_request(request: Request) -> bool:
    """Whether htmx asked for a fragment (a history restore wants the whole page)."""
    return (
        request.headers.get("HX-Request") == "true"
        and request.headers.get("HX-History-Restore-Request") != "true"
    )


def render(
    request: Request,
    template: str,
    context: dict[str, Any],
    *,
    fragment: str | None = None,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    """Render ``template``, or ``fragment`` when htmx asks for one, with the security headers.

    Parameters
    ----------
    request : Request
        The request (its headers decide between page and fragment).
    template : str
        The full page.
    context : dict
        Template variables.
    fragment : str, optional
        The part of the page that htmx swaps; ``None`` when the page has none.
    status_code : int
        HTTP status.
    headers : dict, optional
        Extra response headers (e.g. ``HX-Push-Url``).

    Returns
    -------
    HTMLResponse

    """
    templates: Jinja2Templates = request.app.state.templates
    # Every page shows who is signed in and embeds their CSRF token for forms and htmx.
    principal = request.state._state.get("principal")
    session_context = {
        "user": principal,
        "csrf_token": (principal.csrf_token or "") if principal is not None else "",
    }
    as_fragment = fragment is not None and is_fragment_request(request)
    return templates.TemplateResponse(
        request,
        fragment if as_fragment and fragment is not None else template,
        {**session_context, **context, "fragment": as_fragment},
        status_code=status_code,
        headers={**SECURITY_HEADERS, **(headers or {})},
    )
