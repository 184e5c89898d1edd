"""Deactivating a user ends their sessions, API tokens and sign-in links for good.

Re-activating them later must not bring any of those secrets back: they sign in afresh.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.main import create_app
from app.services.accounts import users
from app.settings import Settings
from app.tables import AuthToken, TokenKind
from app.web.auth import SESSION_COOKIE
from tests.support.auth_support import browser_session, token_for


@pytest.fixture
def admin(settings: Settings, factory: sessionmaker[Session]) -> Iterator[tuple[TestClient, str]]:
    """A browser signed in as an admin, and its CSRF token (``factory`` empties the database)."""
    with TestClient(create_app(settings)) as client:
        yield client, browser_session(client, settings, "root", "admin")


def _set_active(admin: tuple[TestClient, str], name: str, active: bool) -> None:
    client, csrf = admin
    form = {"csrf_token": csrf, "role": "annotator", "active": str(active).lower()}
    done = client.post(f"/admin/users/{name}/role", data=form, follow_redirects=False)
    assert done.status_code == 303, done.text


def test_reactivation_does_not_revive_old_sessions_tokens_or_links(
    settings: Settings, admin: tuple[TestClient, str]
) -> None:
    api = token_for(settings, "ann", "annotator")
    session_secret = token_for(settings, "ann", "annotator", TokenKind.session)
    link = token_for(settings, "ann", "annotator", TokenKind.signin)
    app = admin[0].app
    with TestClient(app) as probe:
        assert probe.get("/queues", headers={"Authorization": f"Bearer {api}"}).status_code == 200
        probe.cookies.set(SESSION_COOKIE, session_secret)
        assert probe.get("/queues", follow_redirects=False).status_code == 200
    _set_active(admin, "ann", False)
    _set_active(admin, "ann", True)
    with TestClient(app) as probe:
        assert probe.get("/api/jobs", headers={"Authorization": f"Bearer {api}"}).status_code == 401
        probe.cookies.set(SESSION_COOKIE, session_secret)
        assert probe.get("/queues", follow_redirects=False).status_code == 303
    with TestClient(app) as fresh:
        page = fresh.get(f"/signin/{link}")
        csrf = page.cookies.get("appellate_login_csrf") or fresh.cookies.get("appellate_login_csrf")
        used = fresh.post(f"/signin/{link}", data={"csrf_token": csrf}, follow_redirects=False)
        assert used.status_code == 410
    # A new token issued after re-activation works: only the old secrets ended.
    fresh_token = token_for(settings, "ann", "annotator")
    with TestClient(app) as probe:
        headers = {"Authorization": f"Bearer {fresh_token}"}
        assert probe.get("/queues", headers=headers).is_success


def test_deactivation_in_the_service_revokes_every_live_token(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    for kind in TokenKind:
        token_for(settings, "bob", "reviewer", kind)
    with transaction(factory) as s:
        users.set_role(s, "bob", "reviewer", active=False)
    with transaction(factory) as s:
        bob = users.get_user(s, "bob")
        users.set_role(s, "bob", "reviewer", active=True)
        assert users.api_tokens(s, bob.id) == []
        live = s.scalars(
            select(AuthToken.kind).where(
                AuthToken.user_id == bob.id, AuthToken.revoked_at.is_(None)
            )
        ).all()
    assert live == []
    # Changing only the role of an active user leaves their tokens alone.
    token_for(settings, "bob", "reviewer")
    with transaction(factory) as s:
        users.set_role(s, "bob", "annotator", active=True)
        assert len(users.api_tokens(s, users.get_user(s, "bob").id)) == 1
