"""The sign-in throttle: per name and client address, counted atomically in the database.

An attempt is counted before its password is checked, so simultaneous guesses cannot all slip
past the check; the count lives in the store, so every server process shares it; and it is
kept per client address, so nobody locks another person out by guessing their password.
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

from app.db import transaction
from app.main import create_app
from app.services.accounts import signin_throttle
from app.settings import Settings
from app.tables import utcnow
from app.web.auth import LOGIN_CSRF_COOKIE
from tests.support.auth_support import PASSWORD, ensure_user
from tests.support.live_server import live_server

LIMIT = signin_throttle.MAX_FAILURES
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
