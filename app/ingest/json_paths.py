"""The JSON path (``a.b[2]``) of the first string in a nested value that fails a check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def first_string_path(
    value: Any, bad: Callable[[str], bool], path: str, *, keys: bool = False, root: str = ""
) -> str | None:
    """The path of the first string in ``value`` for which ``bad`` holds, else ``None``.

    Dict values and list items are searched depth first, in order; with ``keys``, dict keys are
    checked too. ``path`` is where ``value`` stands (``""`` at the top, where a bad string is
    reported as ``root``); an empty path found below is no finding, as an empty path is falsy.
    """
    if isinstance(value, str):
        return (path or root) if bad(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            key_path = f"{path}.{key}" if path else str(key)
            if keys and bad(str(key)):
                return key_path
            if found := first_string_path(item, bad, key_path, keys=keys, root=root):
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if found := first_string_path(item, bad, f"{path}[{i}]", keys=keys, root=root):
                return found
    return None
