"""Start-up: the server warms each benchmark's facets and first table page in the background."""

from __future__ import annotations

import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.settings import Settings
from tests.ingest.test_helpers import O1_MINI, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.support.auth_support import api_client


def _wait_for_warm_up(seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    for thread in threading.enumerate():
        if thread.name == "warm-up":
            thread.join(max(deadline - time.monotonic(), 0.0))
            assert not thread.is_alive()


def test_the_first_table_request_finds_everything_it_needs_cached(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])
    with api_client(settings) as client:
        _wait_for_warm_up()
        cache = client.app.state.read_cache
        warmed = cache.misses
        assert warmed >= 1  # the warm-up computed the facets (and more) before any request
        page = client.get("/benchmarks/judgebench")
        assert page.status_code == 200 and "judgebench" in page.text
        # Nothing the first request read had to be computed by it.
        assert cache.misses == warmed and cache.hits >= 1
