"""The versioned read cache: LRU bound, single-flight computation, failures not cached."""

from __future__ import annotations

import threading
import time

import pytest

from app.sql.cache import VersionedCache


def test_hits_and_lru_eviction() -> None:
    cache = VersionedCache(maxsize=2)
    calls: list[str] = []

    def make(key: str) -> str:
        calls.append(key)
        return key.upper()

    assert cache.get_or_compute("a", lambda: make("a")) == "A"
    assert cache.get_or_compute("a", lambda: make("a")) == "A"
    cache.get_or_compute("b", lambda: make("b"))
    cache.get_or_compute("a", lambda: make("a"))  # refreshes "a"
    cache.get_or_compute("c", lambda: make("c"))  # evicts "b", the least recent
    cache.get_or_compute("a", lambda: make("a"))
    cache.get_or_compute("b", lambda: make("b"))
    assert calls == ["a", "b", "c", "b"]
    assert (cache.hits, cache.misses) == (3, 4)


def test_concurrent_requests_compute_once() -> None:
    cache = VersionedCache()
    started = threading.Event()
    count = 0
    lock = threading.Lock()

    def slow() -> int:
        nonlocal count
        with lock:
            count += 1
        started.set()
        time.sleep(0.2)
        return 42

    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get_or_compute("k", slow)))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [42] * 8
    assert count == 1


def test_a_failure_is_not_cached() -> None:
    cache = VersionedCache()

    def boom() -> int:
        raise RuntimeError("scan failed")

    with pytest.raises(RuntimeError):
        cache.get_or_compute("k", boom)
    assert cache.get_or_compute("k", lambda: 7) == 7


def test_maxsize_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        VersionedCache(maxsize=0)
