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
    wall: dict[str, list[float]] = {name: [] for name in methods}
    cpu: dict[str, list[float]] = {name: [] for name in methods}
    outputs: dict[str, Any] = {}
    names = list(methods)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            sync()
            w, c = time.perf_counter(), time.process_time()
            outputs[name] = methods[name]()
            sync()
            cpu[name].append(time.process_time() - c)
            wall[name].append(time.perf_counter() - w)
    return wall, cpu, outputs
