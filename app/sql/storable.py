"""Values neither database can store, and the storage limits every writer checks against.

A NUL character or a lone surrogate is refused where a value enters the store (an import's
cell, a form field, a decoded filter), with a message that prints it as an escape.
"""

from __future__ import annotations

import re
from typing import Any

from app.sql.json_paths import first_string_finding

# The width of label names and values in the store (``VARCHAR(200)``).
MAX_LABEL_LENGTH = 200
# Lists and objects nested deeper than this are refused where a record is read: real records
# nest a few levels, and every walk of a payload (conversion, checks, JSON encoding) recurses.
MAX_NESTING = 100
# Text neither database can hold: NUL (PostgreSQL's text and JSONB refuse it) and surrogate code
# points, which in a Python str are always lone ones (a JSON "\ud800" escape without its pair):
# no UTF-8 encoder writes them, so PostgreSQL refuses them and SQLite stores what no read returns.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot be stored (a NUL character or a lone surrogate), or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "NUL character (cannot be stored)"
    return f"lone surrogate U+{ord(char):04X} (not Unicode text; cannot be stored)"


def printable(text: str) -> str:
    r"""``text`` with each unstorable character written as an escape (``\u0000``), for messages."""
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def find_unstorable(value: Any, path: str = "", *, root: str = "") -> tuple[str, str] | None:
    """The path (printable) and reason of the first unstorable string, dict key or value.

    ``value`` must be nested at most :data:`MAX_NESTING` deep (the walk recurses).
    """
    # The common flat payload of strings, without recursion; keys checked as one string.
    if (
        type(value) is dict
        and all(type(v) is str and _UNSTORABLE.search(v) is None for v in value.values())
        and _UNSTORABLE.search("".join(map(str, value))) is None
    ):
        return None
    found = first_string_finding(value, unstorable, path, keys=True, root=root)
    return None if found is None else (printable(found[0]), found[1])
