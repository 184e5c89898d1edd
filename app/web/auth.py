"""Who a request acts as, and the role and CSRF checks every route depends on.

A request authenticates with an ``Authorization: Bearer`` API token (CLI, REST) or with the
session cookie a browser gets at sign-in. Cookie-authenticated requests that change anything
must echo the session's CSRF token (form field ``csrf_token`` or header ``X-CSRF-Token``):
the cookie is ambient, the token is not. Bearer requests carry no ambient credential and need
no CSRF token.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from app.db import transaction
from app.services.accounts.users import Principal, principal_for
from app.store import Store
from app.tables import Role, TokenKind

SESSION_COOKIE = "appellate_session"
# The double-submit cookie of the sign-in forms, which are posted before any session exists.
LOGIN_CSRF_COOKIE = "appellate_login_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class NotSignedIn(Exception):
    """No valid credential: HTML pages redirect to the sign-in form, the API answers 401."""


class Forbidden(Exception):
    """Signed in, but without the role or CSRF token the route needs (403)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _lookup(store: Store, request: Request) -> Principal | None:
    header = request.headers.get("authorization", "")
    scheme, _, secret = header.partition(" ")
    with transaction(store.factory) as session:
        if scheme.lower() == "bearer" and secret.strip():
            return principal_for(session, secret.strip(), TokenKind.api)
        cookie = request.cookies.get(SESSION_COOKIE)
        if cookie:
            return principal_for(session, cookie, TokenKind.session)
    return None


async def current_principal(request: Request) -> Principal | None:
    """The signed-in user of this request, or None (looked up once per request)."""
    if "principal" not in request.state._state:
        store: Store = request.app.state.store
        request.state.principal = await run_in_threadpool(_lookup, store, request)
    principal: Principal | None = request.state.principal
    return principal


async def check_csrf(request: Request, expected: str | None) -> None:
    """Raise Forbidden unless a state-changing request echoes ``expected``.

    ``expected`` is None for bearer-token requests, which need no CSRF token.
    """
    if request.method in SAFE_METHODS or expected is None:
        return
    sent = request.headers.get(CSRF_HEADER)
    if sent is None and request.headers.get("content-type", "").startswith(_FORM_TYPES):
        # Starlette keeps the parsed form, so the route's Form() parameters read it again.
        value = (await request.form()).get(CSRF_FIELD)
        sent = value if isinstance(value, str) else None
    if not sent or not secrets.compare_digest(sent, expected):
        raise Forbidden("missing or wrong CSRF token: reload the page and try again")


def require(role: Role) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency: the signed-in user if they hold ``role`` (and echo the CSRF token)."""

    async def dependency(request: Request) -> Principal:
        principal = await current_principal(request)
        if principal is None:
            raise NotSignedIn
        if not principal.can(role):
            raise Forbidden(
                f"this needs the {role.value} role; {principal.name} is {principal.role}"
            )
        await check_csrf(request, principal.csrf_token)
        return principal

    dependency.__name__ = f"require_{role.value}"
    return dependency


def sign_in_url(request: Request) -> str:
    """The sign-in form, coming back to this page afterwards."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return f"/login?next={quote(target, safe='')}"


def is_https(request: Request) -> bool:
    """Whether the client reached us over https (cookies then get the Secure flag)."""
    return request.url.scheme == "https"


RequireAnnotator = Depends(require(Role.annotator))
RequireReviewer = Depends(require(Role.reviewer))
RequireAdmin = Depends(require(Role.admin))
Annotator = Annotated[Principal, RequireAnnotator]
Reviewer = Annotated[Principal, RequireReviewer]
Admin = Annotated[Principal, RequireAdmin]
