"""Bytes the importers read, counted for a job's progress bar (rows come in too fast to count).

The readers (:mod:`app.ingest.readers`, :mod:`app.ingest.json_array`) open their files through
:func:`open_binary` and :func:`open_text`; inside :func:`counting_reads` those count every byte
read and report ``(bytes read, total bytes)`` at most every ``every_s`` seconds. Outside it
they are plain :func:`open` (the command line counts nothing). A context variable rather than a
parameter: every importer reads through the same readers, and none need know about progress.
"""

from __future__ import annotations

import io
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any

__all__ = ["ReadCounter", "count_read", "counting_reads", "open_binary", "open_text"]

Report = Callable[[int, int], None]


class ReadCounter:
    """Bytes read so far out of ``total``, reported through ``report`` now and then."""

    def __init__(self, total: int, report: Report, every_s: float) -> None:
        self.total = total
        self.done = 0
        self.report = report
        self.every_s = every_s
        self._last = -math.inf

    def add(self, n: int) -> None:
        """Count ``n`` more bytes; report if ``every_s`` has passed since the last report."""
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            # A file read twice (a second pass) must not push the bar past its end.
            self.report(min(self.done, self.total), self.total)


_COUNTER: ContextVar[ReadCounter | None] = ContextVar("appellate_read_counter", default=None)


@contextmanager
def counting_reads(total: int, report: Report, *, every_s: float = 0.5) -> Iterator[ReadCounter]:
    """Count the bytes the readers read in this context (this thread) against ``total``.

    Parameters
    ----------
    total
        The bytes there are to read (the sizes of the files imported).
    report
        Called with ``(done, total)``, ``done`` at most ``total``, at most every ``every_s``
        seconds (it writes somewhere: it must not be called per block).
    every_s
        The least time between two reports.

    """
    counter = ReadCounter(total, report, every_s)
    token = _COUNTER.set(counter)
    try:
        yield counter
    finally:
        _COUNTER.reset(token)


def count_read(n: int) -> None:
    """Count ``n`` bytes read by a reader that does not read through :func:`open_binary`."""
    counter = _COUNTER.get()
    if counter is not None:
        counter.add(n)


class _CountingRaw(io.RawIOBase):
    """A raw stream over an open binary file that counts what is read through it."""

    def __init__(self, inner: IO[bytes], counter: ReadCounter) -> None:
        super().__init__()
        self._inner = inner
        self._counter = counter

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._inner.seekable()

    def readinto(self, buffer: Any) -> int:
        data = self._inner.read(len(buffer))
        buffer[: len(data)] = data
        self._counter.add(len(data))
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._inner.seek(offset, whence)

    def tell(self) -> int:
        return self._inner.tell()

    def close(self) -> None:
        self._inner.close()
        super().close()


def open_binary(path: str | os.PathLike[str]) -> IO[bytes]:
    """``open(path, "rb")``, counting its reads inside :func:`counting_reads`."""
    counter = _COUNTER.get()
    fh = open(path, "rb")  # noqa: SIM115 - the caller closes it
    if counter is None:
        return fh
    return io.BufferedReader(_CountingRaw(fh, counter), buffer_size=1 << 16)


def open_text(path: str | os.PathLike[str], *, encoding: str, newline: str | None) -> IO[str]:
    """A text :func:`open` of ``path``, counting its reads inside :func:`counting_reads`."""
    if _COUNTER.get() is None:
        return open(path, encoding=encoding, newline=newline)  # the caller closes it
    return io.TextIOWrapper(open_binary(path), encoding=encoding, newline=newline)
