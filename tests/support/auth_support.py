"""Signed-in test clients: users with a role, API tokens, browser sessions and sign-in links."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import transaction
from app.main import create_app
from app.services.accounts.users import create_user, issue_token
from app.settings import Settings
from app.store import Store
from app.tables import TokenKind, User

PASSWORD = "correct horse battery"


def _user(session: Session, name: str, role: str, password: str | None = None) -> User:
    user = session.scalar(select(User).where(User.name == name))
    return user if user is not None else create_user(session, name, role, password)


def ensure_user(settings: Settings, name: str, role: str, password: str | None = None) -> None:
    """Create user ``name`` with ``role`` unless they exist (migrating the store first)."""
    store = Store.open(settings)
    try:
        with transaction(store.factory) as session:
            _user(session, name, role, password)
    finally:
        store.close()


def token_for(settings: Settings, name: str, role: str, kind: TokenKind = TokenKind.api) -> str:
    """A new secret of ``kind`` for user ``name`` (created with ``role`` if missing)."""
    store = Store.open(settings)
    try:
        with transaction(store.factory) as session:
            secret, _ = issue_token(session, _user(session, name, role), kind)
    finally:
        store.close()
    return secret


def bearer(settings: Settings, name: str = "admin", role: str = "admin") -> dict[str, str]:
    """An Authorization header with a fresh API token of user ``name``."""
    return {"Authorization": f"Bearer {token_for(settings, name, role)}"}


@contextmanager
def api_client(settings: Settings, role: str = "admin", **kwargs: Any) -> Iterator[TestClient]:
    """A TestClient of ``create_app(settings)`` authenticated by an API token of ``role``."""
    headers = bearer(settings, f"test-{role}", role)
    with TestClient(create_app(settings), headers=headers, **kwargs) as client:
        yield client


CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]*)">')


def browser_session(client: TestClient, settings: Settings, name: str, role: str) -> str:
    """Sign ``client`` in through a one-time link as a browser would; returns the CSRF token."""
    secret = token_for(settings, name, role, TokenKind.signin)
    page = client.get(f"/signin/{secret}")
    login_csrf = re.search(r'name="csrf_token" value="([^"]*)"', page.text)
    assert login_csrf is not None
    done = client.post(
        f"/signin/{secret}", data={"csrf_token": login_csrf.group(1)}, follow_redirects=False
    )
    assert done.status_code == 303, done.text
    account = client.get("/account")
    found = CSRF_META.search(account.text)
    assert found is not None and found.group(1)
    return found.group(1)


def signed_in_context(
    browser: Any, url: str, settings: Settings, role: str = "reviewer", **options: Any
) -> Any:
    """A new Playwright browser context holding a session cookie of a user with ``role``."""
    from app.web.auth import SESSION_COOKIE

    secret = token_for(settings, f"browser-{role}", role, TokenKind.session)
    context = browser.new_context(**options)
    context.add_cookies([{"name": SESSION_COOKIE, "value": secret, "url": url}])
    return context
