"""Sign-in, sessions, CSRF, API tokens, roles and the users CLI, on both dialects."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.main import create_app
from app.services.accounts import users
from app.settings import Settings
from app.tables import AuthToken, TokenKind, User
from tests.support.auth_support import PASSWORD, bearer, browser_session, ensure_user, token_for


@pytest.fixture(autouse=True)
def _empty_afterwards(engine: Engine) -> None:
    """Users and tokens go with the database contents after each test (see ``engine``)."""


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


def _login_csrf(client: TestClient) -> str:
    page = client.get("/login")
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def test_pages_redirect_to_sign_in_and_the_api_answers_401(client: TestClient) -> None:
    page = client.get("/benchmarks/x?flip=yes", follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=%2Fbenchmarks%2Fx%3Fflip%3Dyes"
    api = client.get("/api/benchmarks")
    assert api.status_code == 401 and api.headers["www-authenticate"] == "Bearer"
    assert client.get("/healthz").status_code == 200


def test_password_sign_in_sets_a_hardened_cookie_and_sign_out_ends_it(
    client: TestClient, settings: Settings
) -> None:
    ensure_user(settings, "rita", "reviewer", PASSWORD)
    wrong = client.post(
        "/login", data={"name": "rita", "password": "nope-nope", "csrf_token": _login_csrf(client)}
    )
    assert wrong.status_code == 401 and "Wrong name or password." in wrong.text
    ok = client.post(
        "/login",
        data={"name": "rita", "password": PASSWORD, "csrf_token": _login_csrf(client), "next": "/"},
        follow_redirects=False,
    )
    assert ok.status_code == 303 and ok.headers["location"] == "/"
    cookie = next(
        h for h in ok.headers.get_list("set-cookie") if h.startswith("appellate_session=")
    )
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Secure" not in cookie
    assert client.get("/", follow_redirects=False).status_code == 200
    csrf = re.search(r'<meta name="csrf-token" content="([^"]+)">', client.get("/").text)
    assert csrf is not None
    assert client.post("/logout", follow_redirects=False).status_code == 403  # no CSRF token
    out = client.post("/logout", data={"csrf_token": csrf.group(1)}, follow_redirects=False)
    assert out.status_code == 303
    assert client.get("/", follow_redirects=False).status_code == 303
    # The database never holds a secret, only its digest.
    with transaction(users_factory(settings)) as s:
        stored = list(s.scalars(select(AuthToken.token_sha256)))
    assert stored and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in stored)


def users_factory(settings: Settings):  # type: ignore[no-untyped-def]
    from app.store import Store

    return Store.open(settings).factory


def test_sign_in_needs_the_login_csrf_cookie(client: TestClient, settings: Settings) -> None:
    ensure_user(settings, "rita", "reviewer", PASSWORD)
    r = client.post("/login", data={"name": "rita", "password": PASSWORD, "csrf_token": "forged"})
    assert r.status_code == 403


def test_open_redirects_are_refused(client: TestClient, settings: Settings) -> None:
    ensure_user(settings, "rita", "reviewer", PASSWORD)
    for target in ("https://evil.example/", "//evil.example/", "javascript:alert(1)"):
        r = client.post(
            "/login",
            data={
                "name": "rita",
                "password": PASSWORD,
                "csrf_token": _login_csrf(client),
                "next": target,
            },
            follow_redirects=False,
        )
        assert r.headers["location"] == "/"


def test_a_sign_in_link_works_once(client: TestClient, settings: Settings) -> None:
    secret = token_for(settings, "ann", "annotator", TokenKind.signin)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get(f"/signin/{secret}").text)
    assert csrf is not None
    first = client.post(
        f"/signin/{secret}", data={"csrf_token": csrf.group(1)}, follow_redirects=False
    )
    assert first.status_code == 303 and first.headers["location"] == "/queues"
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get(f"/signin/{secret}").text)
    assert csrf is not None
    again = client.post(f"/signin/{secret}", data={"csrf_token": csrf.group(1)})
    assert again.status_code == 410


def test_bearer_tokens_work_until_revoked(settings: Settings) -> None:
    headers = bearer(settings, "cli-user", "reviewer")
    with TestClient(create_app(settings)) as c:
        assert c.get("/api/benchmarks", headers=headers).status_code == 200
        assert c.get("/api/benchmarks", headers={"Authorization": "Bearer nope"}).status_code == 401
        with transaction(users_factory(settings)) as s:
            user = s.scalar(select(User).where(User.name == "cli-user"))
            assert user is not None
            token = s.scalar(select(AuthToken).where(AuthToken.user_id == user.id))
            assert token is not None
            assert users.revoke_token(s, token.id)
        assert c.get("/api/benchmarks", headers=headers).status_code == 401


def test_deactivated_users_lose_access(settings: Settings) -> None:
    headers = bearer(settings, "gone", "reviewer")
    with TestClient(create_app(settings)) as c:
        assert c.get("/api/benchmarks", headers=headers).status_code == 200
        with transaction(users_factory(settings)) as s:
            users.get_user(s, "gone").active = False
        assert c.get("/api/benchmarks", headers=headers).status_code == 401


def test_annotators_cannot_read_the_dashboard(settings: Settings) -> None:
    with TestClient(create_app(settings), headers=bearer(settings, "ann", "annotator")) as c:
        assert c.get("/").status_code == 403
        assert c.get("/api/benchmarks").status_code == 403
        assert c.get("/admin/users").status_code == 403
        assert c.get("/account").status_code == 200


def test_admin_adds_users_and_issues_links_with_csrf(settings: Settings) -> None:
    with TestClient(create_app(settings)) as c:
        csrf = browser_session(c, settings, "boss", "admin")
        assert c.post("/admin/users", data={"name": "x", "role": "annotator"}).status_code == 403
        r = c.post("/admin/users", data={"name": "newbie", "role": "annotator", "csrf_token": csrf})
        assert r.status_code == 200
        link = re.search(r'<code id="signin-link">([^<]+)</code>', r.text)
        assert link is not None and "/signin/" in link.group(1)
        dup = c.post("/admin/users", data={"name": "newbie", "role": "admin", "csrf_token": csrf})
        assert dup.status_code == 409
        bad = c.post("/admin/users", data={"name": "n2", "role": "owner", "csrf_token": csrf})
        assert bad.status_code == 422 and "unknown role" in bad.text
        own = c.post("/admin/users/boss/role", data={"role": "annotator", "csrf_token": csrf})
        assert own.status_code == 422


def test_users_cli_adds_a_user_with_a_password_from_stdin(settings: Settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    if settings.database_url:
        monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.database_url)
    runner = CliRunner()
    r = runner.invoke(
        cli, ["users", "add", "vera", "--role", "reviewer", "--password-stdin"], input=PASSWORD
    )
    assert r.exit_code == 0, r.output
    assert "password:" not in r.output and "/signin/" in r.output
    r2 = runner.invoke(cli, ["users", "add", "gen", "--role", "annotator"])
    generated = re.search(r"password: (\S+)", r2.output)
    assert generated is not None
    dup = runner.invoke(cli, ["users", "add", "vera", "--role", "admin"])
    assert dup.exit_code == 2 and "already exists" in dup.output
    bad = runner.invoke(cli, ["users", "add", "x", "--role", "owner"])
    assert bad.exit_code == 2
    with transaction(users_factory(settings)) as s:
        assert users.authenticate(s, "vera", PASSWORD) is not None
        assert users.authenticate(s, "gen", generated.group(1)) is not None
        assert users.authenticate(s, "vera", "wrong-password") is None
    listing = runner.invoke(cli, ["users", "list"])
    assert "vera\treviewer\tactive" in listing.output
    token = runner.invoke(cli, ["users", "token", "vera"]).output.strip()
    with TestClient(create_app(settings)) as c:
        r3 = c.get("/api/benchmarks", headers={"Authorization": f"Bearer {token}"})
        assert r3.status_code == 200


def test_repeated_wrong_passwords_are_throttled(client: TestClient, settings: Settings) -> None:
    from app.services.accounts.signin_throttle import MAX_FAILURES

    ensure_user(settings, "rita", "reviewer", PASSWORD)
    for _ in range(MAX_FAILURES):
        r = client.post(
            "/login",
            data={"name": "rita", "password": "wrong-guess", "csrf_token": _login_csrf(client)},
        )
        assert r.status_code == 401
    # Even the right password is refused until the window passes.
    r = client.post(
        "/login",
        data={"name": "rita", "password": PASSWORD, "csrf_token": _login_csrf(client)},
    )
    assert r.status_code == 429 and "Too many failed sign-ins" in r.text
