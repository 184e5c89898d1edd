"""The read lane: page work runs on at most ``page_threads`` threads, errors propagate."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from app.web.lane import ReadLane


def test_runs_at_most_its_thread_count_at_once() -> None:
    lane = ReadLane(2)
    lock = threading.Lock()
    running = peak = 0

    def work(k: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return k * k

    async def main() -> list[int]:
        results = [0] * 6

        async def one(k: int) -> None:
            results[k] = await lane.run(work, k)

        async with anyio.create_task_group() as tg:
            for k in range(6):
                tg.start_soon(one, k)
        return results

    assert anyio.run(main) == [0, 1, 4, 9, 16, 25]
    assert peak == 2


def test_errors_reach_the_caller() -> None:
    lane = ReadLane(1)

    def boom() -> None:
        raise LookupError("no such page")

    with pytest.raises(LookupError, match="no such page"):
        anyio.run(lane.run, boom)


def test_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        ReadLane(0)
