"""Interleaved timing rounds shared by the benchmark scripts (method order rotates each round)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def run_rounds(
    methods: dict[str, Callable[[], Any]],
    rounds: int,
    sync: Callable[[], None] = lambda: None,
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, Any]]:
    """Run every method once per round; wall and process CPU seconds per run, last outputs.

    The order rotates each round so no method always runs right after a given other one (caches,
    thermal state and other processes then spread evenly); ``sync`` is called before and after
    each run (a CUDA synchronise, so queued kernels are counted where they belong).
    """
    wall, cpu, _, outputs = run_metered_rounds(methods, rounds, sync=sync)
    return wall, cpu, outputs


def run_metered_rounds(
    methods: dict[str, Callable[[], Any]],
    rounds: int,
    meter: Callable[[], float | None] = lambda: None,
    sync: Callable[[], None] = lambda: None,
) -> tuple[
    dict[str, list[float]], dict[str, list[float]], dict[str, list[float | None]], dict[str, Any]
]:
    """:func:`run_rounds`, and per run the change of ``meter`` (``None`` where it reads ``None``).

    ``meter`` is another running total, such as the database server's CPU seconds
    (``db_cpu.DatabaseCpu.seconds``); it is read just before and just after each run, outside
    the timed span, so reading it costs neither the wall nor the process CPU figures.
    """
    wall: dict[str, list[float]] = {name: [] for name in methods}
    cpu: dict[str, list[float]] = {name: [] for name in methods}
    metered: dict[str, list[float | None]] = {name: [] for name in methods}
    outputs: dict[str, Any] = {}
    names = list(methods)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            before = meter()
            sync()
            w, c = time.perf_counter(), time.process_time()
            outputs[name] = methods[name]()
            sync()
            cpu[name].append(time.process_time() - c)
            wall[name].append(time.perf_counter() - w)
            after = meter()
            metered[name].append(None if before is None or after is None else after - before)
    return wall, cpu, metered, outputs
