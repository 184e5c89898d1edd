"""A real uvicorn server for browser tests, on a free loopback port in a background thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from uvicorn._types import ASGIApplication

from app.main import create_app
from app.settings import Settings


def wait_for_http(url: str, deadline: float) -> None:
    """Poll ``url`` until it answers 200, or fail at ``deadline`` (a ``time.monotonic`` value)."""
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not come up")


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def live_server(settings: Settings) -> Iterator[str]:
    """Serve ``create_app(settings)`` until the block ends; yields the base URL."""
    with serve_app(create_app(settings)) as url:
        yield url


@contextmanager
def serve_app(app: ASGIApplication) -> Iterator[str]:
    """Serve any ASGI ``app`` on a free loopback port until the block ends; yields the URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
