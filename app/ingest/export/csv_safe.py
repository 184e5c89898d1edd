"""CSV writing that spreadsheets cannot run: every CSV the app writes goes through :func:`writer`.

A cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is taken for a
formula by Excel, LibreOffice and Google Sheets ("CSV injection"); benchmark text, ids and
reviewers' notes are untrusted, so such a cell gets a leading single quote, as OWASP
recommends. Plain numbers (``-0.25``, ``+3``, ``1e-05``) are left alone: they cannot be a
formula, and a score column stays numeric.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import Any, Protocol

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


class _Text(Protocol):
    def write(self, s: str, /) -> Any: ...


def neutralise(cell: str) -> str:
    """``cell``, with a leading ``'`` if a spreadsheet would read it as a formula."""
    if cell.startswith(_FORMULA_START) and not _NUMBER.fullmatch(cell):
        return "'" + cell
    return cell


def _safe(row: Iterable[Any]) -> list[Any]:
    # Non-text cells (ints, floats, None) are written by the csv module as numbers or "".
    return [neutralise(c) if isinstance(c, str) else c for c in row]


class SafeWriter:
    """A ``csv.writer`` whose text cells are :func:`neutralise`-d."""

    def __init__(self, fh: _Text, **fmt: Any) -> None:
        self._writer = csv.writer(fh, **fmt)

    def writerow(self, row: Iterable[Any]) -> Any:
        """Write one row."""
        return self._writer.writerow(_safe(row))

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        """Write every row."""
        self._writer.writerows(_safe(row) for row in rows)


def writer(fh: _Text, **fmt: Any) -> SafeWriter:
    """A CSV writer on ``fh`` (``fmt`` as for ``csv.writer``) that spreadsheets cannot run."""
    return SafeWriter(fh, **fmt)
