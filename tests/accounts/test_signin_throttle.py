"""The sign-in throttle: per name and client address, and per name, counted atomically in the store.

An attempt is counted before its password is checked, so simultaneous guesses cannot all slip
past the check; the count lives in the store, so every server process shares it. It is kept per
client address, so guesses from one place do not lock the name out elsewhere, and per name over
every address for a short window (issue 21 item 18), so guesses from many addresses get no more
password checks than a few addresses would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app.db import transaction
from app.main import create_app
from app.services.accounts import signin_throttle, users
from app.settings import Settings
from app.tables import utcnow
from app.web.auth import LOGIN_CSRF_COOKIE
from tests.support.auth_support import PASSWORD, ensure_user
from tests.support.live_server import live_server, serve_app

LIMIT = signin_throttle.MAX_FAILURES
ACCOUNT_LIMIT = signin_throttle.ACCOUNT_MAX_FAILURES
WRONG = "not the password"


@pytest.fixture
def rita(settings: Settings, factory: sessionmaker[Session]) -> str:
    """A reviewer with a password (``factory`` empties the database after the test)."""
    ensure_user(settings, "rita", "reviewer", PASSWORD)
    return "rita"


@pytest.fixture
def clients(settings: Settings) -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def _client(stack: ExitStack, settings: Settings, address: str) -> TestClient:
    """A client of a new app (as another server process would be) seen from ``address``."""
    return stack.enter_context(TestClient(create_app(settings), client=(address, 50000)))


def _sign_in(client: httpx.Client | TestClient, name: str, password: str) -> int:
    # The sign-in form's CSRF token is a double-submit cookie: any value echoed in the form.
    client.cookies.set(LOGIN_CSRF_COOKIE, "t")
    data = {"name": name, "password": password, "csrf_token": "t"}
    return client.post("/login", data=data, follow_redirects=False).status_code


def test_thirty_simultaneous_wrong_passwords_get_at_most_five_checked(
    settings: Settings, rita: str
) -> None:
    n = 30
    barrier = threading.Barrier(n)
    codes: list[int] = []
    lock = threading.Lock()
    with live_server(settings) as url:

        def guess() -> None:
            with httpx.Client(base_url=url, timeout=120) as c:
                c.cookies.set(LOGIN_CSRF_COOKIE, "t")
                barrier.wait()
                code = c.post(
                    "/login", data={"name": rita, "password": WRONG, "csrf_token": "t"}
                ).status_code
            with lock:
                codes.append(code)

        threads = [threading.Thread(target=guess) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with httpx.Client(base_url=url, timeout=60) as c:
            # The same address stays locked out, even with the right password.
            assert _sign_in(c, rita, PASSWORD) == 429
    assert sorted(codes) == [401] * LIMIT + [429] * (n - LIMIT)


def test_the_count_is_shared_by_server_processes_and_kept_per_address(
    settings: Settings, rita: str, clients: ExitStack
) -> None:
    first = _client(clients, settings, "198.51.100.1")
    second = _client(clients, settings, "198.51.100.1")  # another process, same address
    other = _client(clients, settings, "203.0.113.9")
    for _ in range(LIMIT - 2):
        assert _sign_in(first, rita, WRONG) == 401
    for _ in range(2):
        assert _sign_in(second, rita, WRONG) == 401
    assert _sign_in(first, rita, WRONG) == 429
    assert _sign_in(second, rita, PASSWORD) == 429
    # Someone else's guesses never lock out a correct password from an address that has not failed.
    assert _sign_in(other, rita, PASSWORD) == 303
    # Other names from the failing address are not affected either.
    ensure_user(settings, "sam", "reviewer", PASSWORD)
    assert _sign_in(first, "sam", PASSWORD) == 303


def test_a_successful_sign_in_clears_the_failures(
    settings: Settings, rita: str, clients: ExitStack
) -> None:
    c = _client(clients, settings, "198.51.100.2")
    for _ in range(LIMIT - 1):
        assert _sign_in(c, rita, WRONG) == 401
    assert _sign_in(c, rita, PASSWORD) == 303
    for _ in range(LIMIT):
        assert _sign_in(c, rita, WRONG) == 401
    assert _sign_in(c, rita, WRONG) == 429


def test_the_lockout_ends_with_its_window(factory: sessionmaker[Session]) -> None:
    start = utcnow()

    def admit(at: timedelta) -> bool:
        with transaction(factory) as s:
            return signin_throttle.admit(s, "rita", "192.0.2.1", now=start + at)

    assert all(admit(timedelta(seconds=i)) for i in range(LIMIT))
    assert not admit(timedelta(seconds=LIMIT))
    assert not admit(signin_throttle.WINDOW - timedelta(seconds=1))
    assert admit(signin_throttle.WINDOW + timedelta(seconds=1))  # a fresh window
    with transaction(factory) as s:  # names and addresses are counted apart
        assert signin_throttle.admit(s, "rita", "192.0.2.2", now=start)
        assert signin_throttle.admit(s, "rita\x00", "192.0.2.1", now=start)


def test_thirty_addresses_get_at_most_the_account_limit_of_password_checks(
    settings: Settings, rita: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 simultaneous guesses, each from its own address, check at most ten passwords.

    The server sits behind a trusted proxy that forwards 30 client addresses (as a proxy
    forwarding a botnet's requests would, or one that passes a spoofed X-Forwarded-For on):
    before the account-wide count every one of them was a password check.
    """
    checks: list[str] = []
    lock = threading.Lock()
    authenticate = users.authenticate

    def counted(session: Session, name: str, password: str) -> object:
        with lock:
            checks.append(name)
        return authenticate(session, name, password)

    monkeypatch.setattr(users, "authenticate", counted)
    n = 30
    barrier = threading.Barrier(n)
    answers: list[tuple[int, str]] = []
    app = ProxyHeadersMiddleware(create_app(settings), trusted_hosts="127.0.0.1")
    with serve_app(app) as url:

        def guess(i: int) -> None:
            headers = {"X-Forwarded-For": f"203.0.113.{i + 1}"}
            with httpx.Client(base_url=url, timeout=120, headers=headers) as c:
                c.cookies.set(LOGIN_CSRF_COOKIE, "t")
                barrier.wait()
                got = c.post("/login", data={"name": rita, "password": WRONG, "csrf_token": "t"})
            with lock:
                answers.append((got.status_code, got.text))

        threads = [threading.Thread(target=guess, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # The name stays locked for its window from a fresh address, even with the right
        # password; another name is not.
        with httpx.Client(base_url=url, timeout=60) as c:
            c.headers["X-Forwarded-For"] = "198.51.100.77"
            assert _sign_in(c, rita, PASSWORD) == 429
            ensure_user(settings, "sam", "reviewer", PASSWORD)
            assert _sign_in(c, "sam", PASSWORD) == 303
    assert checks.count(rita) == ACCOUNT_LIMIT
    assert sorted(code for code, _ in answers) == [401] * ACCOUNT_LIMIT + [429] * (
        n - ACCOUNT_LIMIT
    )
    refused = [text for code, text in answers if code == 429]
    assert all("paused for a minute" in text for text in refused)


def test_the_account_lockout_is_short_and_per_address_refusals_do_not_spend_it(
    factory: sessionmaker[Session],
) -> None:
    start = utcnow()

    def refusal(client: str, at: timedelta, name: str = "rita") -> str | None:
        with transaction(factory) as s:
            return signin_throttle.refusal(s, name, client, now=start + at)

    second = timedelta(seconds=1)
    # One address hammering the name: refused by its own count after five, and those
    # refusals are not counted against the name (others can still sign in).
    for i in range(LIMIT):
        assert refusal("192.0.2.1", i * second) is None
    for _ in range(20):
        assert refusal("192.0.2.1", LIMIT * second) == signin_throttle.ADDRESS_REFUSAL
    # The rest of the name's allowance, one address each; then every address is refused.
    for i in range(ACCOUNT_LIMIT - LIMIT):
        assert refusal(f"198.51.100.{i}", 10 * second) is None
    assert refusal("203.0.113.1", 11 * second) == signin_throttle.ACCOUNT_REFUSAL
    assert refusal("203.0.113.1", 11 * second, name="sam") is None
    # A minute after the name's first counted attempt, a new address is let through again.
    after = signin_throttle.ACCOUNT_WINDOW + second
    assert refusal("203.0.113.2", after) is None
