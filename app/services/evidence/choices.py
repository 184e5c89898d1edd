"""Cell values of multiple-choice tables: option lists (parsed safely) and option letters."""

from __future__ import annotations

import ast
import json
import math
import string
from typing import Any

from app.sql.storable import MAX_LABEL_LENGTH

__all__ = ["MAX_OPTIONS", "option_letter", "option_letters", "parse_options"]

MAX_OPTIONS = 26
# Long enough for any real option list, short enough that parsing cannot be made to explode.
MAX_OPTIONS_TEXT = 1_000_000


def option_letters(k: int) -> str:
    """The letters of ``k`` options: ``"ABCD"`` for four."""
    return string.ascii_uppercase[:k]


def parse_options(value: Any) -> list[str]:
    """The option texts of a cell: a list, or a string holding a Python-literal or JSON list.

    The string is parsed as a literal (``ast.literal_eval``, never evaluated as code), so
    ``"['a', 'b']"`` (pandas' way of writing a list) and ``'["a", "b"]'`` both work.

    Raises
    ------
    ValueError
        For anything but a list of 2 to 26 strings.

    """
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError("empty: expected a list of options")
        if len(text) > MAX_OPTIONS_TEXT:
            raise ValueError(f"longer than {MAX_OPTIONS_TEXT} characters")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                raise ValueError(
                    f"not a list literal: {text[:60]!r}{'…' if len(text) > 60 else ''}"
                ) from None
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list):
        raise ValueError(f"expected a list of options, got {type(value).__name__}")
    if not 2 <= len(value) <= MAX_OPTIONS:
        raise ValueError(f"expected 2 to {MAX_OPTIONS} options, got {len(value)}")
    for i, option in enumerate(value):
        if not isinstance(option, str):
            raise ValueError(f"option {i + 1} is a {type(option).__name__}, not a string")
    return list(value)


def option_letter(value: Any, k: int) -> str | None:
    """The option letter a cell names: a letter, or a 0-based option index; None when empty.

    Raises
    ------
    ValueError
        For a value that names none of the ``k`` options.

    """
    letters = option_letters(k)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected an option letter {letters[0]}-{letters[-1]}, got {value!r}")
    text = value.strip().upper() if isinstance(value, str) else value
    if isinstance(text, str) and len(text) == 1 and text in letters:
        return text
    try:
        index = float(text)
    except (TypeError, ValueError):
        index = -1.0
    if math.isfinite(index) and index == int(index) and 0 <= index < k:
        return letters[int(index)]
    shown = value if not isinstance(value, str) else value[:MAX_LABEL_LENGTH]
    raise ValueError(
        f"expected an option letter {letters[0]}-{letters[-1]} or an index 0-{k - 1}, got {shown!r}"
    )
