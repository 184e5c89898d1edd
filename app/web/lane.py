"""A narrow thread lane for the hot read pages: the instance table and the instance page.

Python runs one thread at a time, and ``sqlite3`` releases the GIL on every fetched row, so
with many threads in page reads the GIL changes hands hundreds of times per request: with 8
concurrent clients on FastAPI's 40-thread pool a table page cost 8.7 ms of CPU instead of
4.2 ms. The work was CPU-bound either way, so running it on a few threads loses no throughput
and roughly halves the latency under load (``benchmarks/pages_bench.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Concatenate, ParamSpec, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi import Depends, FastAPI, Request
from sqlalchemy.orm import Session

from app.db import transaction
from app.store import Store

P = ParamSpec("P")
T = TypeVar("T")


class ReadLane:
    """Runs blocking page work on at most ``threads`` worker threads at a time."""

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError("a read lane needs at least one thread")
        self._limiter = CapacityLimiter(threads)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Call ``fn(*args, **kwargs)`` on a lane thread and return its result (or raise)."""
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=self._limiter)

    async def read(
        self,
        store: Store,
        fn: Callable[Concatenate[Session, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Call service ``fn(session, *args, **kwargs)`` in one transaction on a lane thread."""

        def call() -> T:
            with transaction(store.factory) as session:
                return fn(session, *args, **kwargs)

        return await self.run(call)


def app_lane(app: FastAPI) -> ReadLane:
    """The application's lane, made on first use with ``settings.page_threads`` threads."""
    lane: ReadLane | None = getattr(app.state, "read_lane", None)
    if lane is None:
        # Only the event loop thread gets here, so two lanes are never made side by side.
        lane = app.state.read_lane = ReadLane(app.state.settings.page_threads)
    return lane


async def read_lane(request: Request) -> ReadLane:
    """Dependency: the lane of the running application (``async``: no thread-pool hop)."""
    return app_lane(request.app)


Lane = Annotated[ReadLane, Depends(read_lane)]
