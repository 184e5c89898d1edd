"""X-Forwarded-For is believed only from configured proxies (issue 21 item 18).

uvicorn trusts it from loopback peers by default: 30 spoofed addresses were 30 password checks
past the sign-in throttle. ``appellate serve`` passes :func:`app.cli.serve.proxy_options`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
import uvicorn

from app.cli.serve import proxy_options
from app.settings import Settings
from tests.support.live_server import free_port

SPOOFED = "203.0.113.7"


async def _client_address(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An ASGI app answering with the client address uvicorn gave the request."""
    if scope["type"] != "http":
        return
    body = scope["client"][0].encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def _seen_address(settings: Settings) -> str:
    port = free_port()
    config = uvicorn.Config(
        _client_address, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
        **proxy_options(settings),
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        got = httpx.get(f"http://127.0.0.1:{port}/", headers={"X-Forwarded-For": SPOOFED})
        return got.text
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.mark.parametrize(
    ("allowed", "seen"),
    [("", "127.0.0.1"), ("10.9.8.7", "127.0.0.1"), ("127.0.0.1", SPOOFED)],
)
def test_a_forwarded_address_counts_only_from_a_trusted_proxy(allowed: str, seen: str) -> None:
    assert _seen_address(Settings(forwarded_allow_ips=allowed)) == seen
