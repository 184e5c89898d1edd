"""A small thread-safe memo for derived read results, keyed on a benchmark's ``data_version``.

Writers bump ``Benchmark.data_version`` whenever instances, labels, judgments or scores change,
so a key that contains it (see ``facets.version_key``) can never serve a stale value; old
versions simply age out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class VersionedCache:
    """A bounded LRU memo with single-flight computation.

    Concurrent requests for the same missing key wait for one computation instead of
    running the same expensive scan side by side.

    Parameters
    ----------
    maxsize : int
        Number of entries kept; the least recently used one is dropped first.

    """

    def __init__(self, maxsize: int = 512) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._inflight: dict[Hashable, threading.Event] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_compute(self, key: Hashable, compute: Callable[[], T]) -> T:
        """Return the value cached under ``key``, computing and storing it when missing.

        Parameters
        ----------
        key : Hashable
            Must contain everything the value depends on (benchmark id and data_version).
        compute : callable
            Builds the value; called at most once at a time per key.

        Returns
        -------
        object
            The cached or freshly computed value.

        """
        while True:
            with self._lock:
                if key in self._data:
                    self._data.move_to_end(key)
                    self.hits += 1
                    return self._data[key]  # type: ignore[no-any-return]
                waiter = self._inflight.get(key)
                if waiter is None:
                    done = threading.Event()
                    self._inflight[key] = done
                    self.misses += 1
                    break
            # Another thread is computing this key: wait, then read its result (or retry if
            # it failed and stored nothing).
            waiter.wait()
        try:
            value = compute()
            self.put(key, value)
            return value
        finally:
            with self._lock:
                del self._inflight[key]
            done.set()

    def __contains__(self, key: Hashable) -> bool:
        """Whether a value is cached under ``key`` (neither a hit nor a use: moves nothing)."""
        with self._lock:
            return key in self._data

    def peek(self, key: Hashable) -> Any | None:
        """The value cached under ``key`` (counted as a hit), else ``None``; computes nothing."""
        with self._lock:
            if key not in self._data:
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return self._data[key]

    def put(self, key: Hashable, value: Any) -> None:
        """Cache ``value`` under ``key`` (a value read from a slower store than this one)."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry (tests and benchmarks measure cold paths with it)."""
        with self._lock:
            self._data.clear()
