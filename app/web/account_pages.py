"""Sign-in (password or one-time link), sign-out, a user's API tokens, and user administration."""

from __future__ import annotations

import secrets
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Form, Request
from fastapi.responses import HTMLResponse, Response

from app.db import transaction
from app.services.accounts import signin_throttle, users
from app.services.accounts.users import Principal
from app.tables import Role, TokenKind, User
from app.web.auth import (
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    Admin,
    Annotator,
    Forbidden,
    RequireAdmin,
    is_https,
)
from app.web.deps import StoreDep
from app.web.params import DbId
from app.web.responses import redirect_after_post
from app.web.routers import page_router
from app.web.templating import render

router = page_router()


def safe_next(target: str | None) -> str:
    """``target`` if it is a path on this site, else ``/`` (no open redirects)."""
    if not target:
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


def _login_csrf(request: Request) -> str:
    return request.cookies.get(LOGIN_CSRF_COOKIE) or secrets.token_urlsafe(32)


def _check_login_csrf(request: Request, sent: str) -> None:
    cookie = request.cookies.get(LOGIN_CSRF_COOKIE)
    if not cookie or not sent or not secrets.compare_digest(cookie, sent):
        raise Forbidden("missing or wrong CSRF token: reload the sign-in page and try again")


def _with_login_csrf(request: Request, response: Response, token: str) -> Response:
    response.set_cookie(
        LOGIN_CSRF_COOKIE, token, httponly=True, samesite="lax", secure=is_https(request)
    )
    return response


def _start_session(request: Request, store: StoreDep, user: User, target: str) -> Response:
    with transaction(store.factory) as session:
        secret, _ = users.issue_token(session, user, TokenKind.session, label="browser")
    target = safe_next(target)
    if target == "/" and user.role == Role.annotator:
        # The dashboard shows labels and scores; an annotator's home is their review queues.
        target = "/queues"
    response = redirect_after_post(request, target)
    response.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=int(users.SESSION_TTL.total_seconds()),
        httponly=True,
        samesite="lax",
        secure=is_https(request),
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE)
    return response


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/") -> Response:
    """The sign-in form."""
    return _login_page(request, next)


def _login_page(
    request: Request, next: str, name: str = "", error: str | None = None, status: int = 200
) -> Response:
    token = _login_csrf(request)
    context = {"next": safe_next(next), "login_csrf": token, "error": error, "name": name}
    page = render(request, "login.html", context, status_code=status)
    return _with_login_csrf(request, page, token)


@router.post("/login", response_class=HTMLResponse)
def login(
    request: Request,
    store: StoreDep,
    name: Annotated[str, Form()],
    password: Annotated[str, Form()],
    csrf_token: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/",
) -> Response:
    """Check the password and start a browser session; the same message for any failure."""
    _check_login_csrf(request, csrf_token)
    client = request.client.host if request.client else ""
    # Counted before the password is checked (see signin_throttle), in its own transaction.
    with transaction(store.write_factory) as session:
        refused = signin_throttle.refusal(session, name, client)
    if refused is not None:
        return _login_page(request, next, name, refused, 429)
    with transaction(store.factory) as session:
        user = users.authenticate(session, name, password)
    if user is None:
        return _login_page(request, next, name, "Wrong name or password.", 401)
    with transaction(store.write_factory) as session:
        signin_throttle.succeeded(session, name, client)
    return _start_session(request, store, user, next)


@router.get("/signin/{secret}", response_class=HTMLResponse)
def signin_link(request: Request, secret: str) -> Response:
    """A one-time link's landing page: a button, so that link previewers do not use it up."""
    token = _login_csrf(request)
    context = {"secret": secret, "login_csrf": token}
    return _with_login_csrf(request, render(request, "signin.html", context), token)


@router.post("/signin/{secret}", response_class=HTMLResponse)
def signin_redeem(
    request: Request,
    secret: str,
    store: StoreDep,
    csrf_token: Annotated[str, Form()] = "",
) -> Response:
    """Use the link up and start a session."""
    _check_login_csrf(request, csrf_token)
    with transaction(store.factory) as session:
        user = users.redeem_signin(session, secret)
        if user is not None:
            session.expunge(user)
    if user is None:
        context = {"status": 410, "title": "Link not valid", "clear_url": None}
        context["messages"] = ["This sign-in link was already used, has expired or is unknown."]
        return render(request, "error.html", context, status_code=410)
    return _start_session(request, store, user, "/")


@router.post("/logout")
def logout(request: Request, store: StoreDep, principal: Annotator) -> Response:
    """End this browser session."""
    with transaction(store.factory) as session:
        users.revoke_token(session, principal.token_id, user_id=principal.user_id)
    response = redirect_after_post(request, "/login")
    response.delete_cookie(SESSION_COOKIE)
    return response


def _account_page(
    request: Request, store: StoreDep, principal: Principal, new_token: str | None = None
) -> HTMLResponse:
    with transaction(store.factory) as session:
        tokens = users.api_tokens(session, principal.user_id)
        for token in tokens:
            session.expunge(token)
    return render(request, "account.html", {"tokens": tokens, "new_token": new_token})


@router.get("/account", response_class=HTMLResponse)
def account(request: Request, store: StoreDep, principal: Annotator) -> HTMLResponse:
    """Your role and API tokens."""
    return _account_page(request, store, principal)


@router.post("/account/password")
def set_password(
    request: Request,
    store: StoreDep,
    principal: Annotator,
    password: Annotated[str, Form()],
) -> Response:
    """Set your password; every browser session (this one included) ends."""
    with transaction(store.factory) as session:
        users.set_password(session, users.user_of(session, principal), password)
    response = redirect_after_post(request, "/login")
    response.delete_cookie(SESSION_COOKIE)
    return response


@router.post("/account/tokens", response_class=HTMLResponse)
def new_api_token(
    request: Request,
    store: StoreDep,
    principal: Annotator,
    label: Annotated[str, Form(max_length=200)] = "",
) -> HTMLResponse:
    """Issue an API token; its secret is shown on this page once."""
    with transaction(store.factory) as session:
        user = users.user_of(session, principal)
        secret, _ = users.issue_token(session, user, TokenKind.api, label=label)
    return _account_page(request, store, principal, new_token=secret)


@router.post("/account/tokens/{token_id}/revoke")
def revoke_api_token(
    request: Request, token_id: DbId, store: StoreDep, principal: Annotator
) -> Response:
    """Revoke one of your API tokens."""
    with transaction(store.factory) as session:
        users.revoke_token(session, token_id, user_id=principal.user_id)
    return redirect_after_post(request, "/account")


def _users_page(
    request: Request, store: StoreDep, link: tuple[str, str] | None = None
) -> HTMLResponse:
    with transaction(store.factory) as session:
        rows = users.list_users(session)
        for row in rows:
            session.expunge(row)
    return render(request, "users.html", {"users": rows, "link": link})


@router.get("/admin/users", response_class=HTMLResponse, dependencies=[RequireAdmin])
def users_page(request: Request, store: StoreDep) -> HTMLResponse:
    """Every user, with forms to add one, change a role and send a sign-in link."""
    return _users_page(request, store)


def signin_link_url(request: Request, secret: str) -> str:
    """The absolute one-time sign-in URL of ``secret`` on this server."""
    return str(request.base_url).rstrip("/") + f"/signin/{secret}"


@router.post("/admin/users", response_class=HTMLResponse, dependencies=[RequireAdmin])
def add_user(
    request: Request,
    store: StoreDep,
    name: Annotated[str, Form()],
    role: Annotated[str, Form()],
) -> HTMLResponse:
    """Add a user and show their one-time sign-in link."""
    with transaction(store.factory) as session:
        user = users.create_user(session, name.strip(), role)
        secret, _ = users.issue_token(session, user, TokenKind.signin)
    return _users_page(request, store, link=(name.strip(), signin_link_url(request, secret)))


@router.post("/admin/users/{name}/link", response_class=HTMLResponse, dependencies=[RequireAdmin])
def new_signin_link(request: Request, name: str, store: StoreDep) -> Response:
    """A fresh one-time sign-in link for a user (e.g. a forgotten password)."""
    with transaction(store.factory) as session:
        user = users.get_user(session, name)
        secret, _ = users.issue_token(session, user, TokenKind.signin)
    return _users_page(request, store, link=(name, signin_link_url(request, secret)))


@router.post("/admin/users/{name}/role")
def change_role(
    request: Request,
    name: str,
    store: StoreDep,
    principal: Admin,
    role: Annotated[str, Form()],
    active: Annotated[bool, Form()] = True,
) -> Response:
    """Change a user's role, or deactivate them (every session and token stops working)."""
    with transaction(store.factory) as session:
        users.set_role(session, name, role, active=active, changed_by=principal)
    return redirect_after_post(request, "/admin/users")
