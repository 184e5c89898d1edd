"""Walks of nested JSON values: the path (``a.b[2]``) of the first bad string, and the depth."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")


def first_string_finding(
    value: Any,
    check: Callable[[str], R | None],
    path: str,
    *,
    keys: bool = False,
    root: str = "",
) -> tuple[str, R] | None:
    """The path of the first string in ``value`` that ``check`` finds fault with, and the fault.

    Dict values and list (or tuple) items are searched depth first, in order; with ``keys``,
    dict keys are checked too (a key before its value). ``check`` returns None for a good
    string. ``path`` is where ``value`` stands (``""`` at the top, where a bad string is
    reported as ``root``). Recursive: callers bound the depth first (:func:`nesting_depth`).
    """
    if isinstance(value, str):
        fault = check(value)
        return None if fault is None else (path or root, fault)
    if isinstance(value, dict):
        for key, item in value.items():
            key_path = f"{path}.{key}" if path else str(key)
            if keys and (fault := check(str(key))) is not None:
                return key_path, fault
            if found := first_string_finding(item, check, key_path, keys=keys, root=root):
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if found := first_string_finding(item, check, f"{path}[{i}]", keys=keys, root=root):
                return found
    return None


def first_string_path(
    value: Any, bad: Callable[[str], bool], path: str, *, keys: bool = False, root: str = ""
) -> str | None:
    """The path of the first string in ``value`` for which ``bad`` holds, else ``None``.

    As :func:`first_string_finding`; an empty path found below is no finding, as an empty path
    is falsy.
    """
    found = first_string_finding(
        value, lambda text: True if bad(text) else None, path, keys=keys, root=root
    )
    return found[0] if found else None


def nesting_depth(value: Any, limit: int) -> int:
    """How deeply lists and dicts nest in ``value`` (a scalar is 0), counted up to ``limit + 1``.

    Iterative, so a value nested past the interpreter's recursion limit is measured, not a
    RecursionError; it stops once ``limit`` is exceeded.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        stack.extend((child, depth) for child in children)
    return deepest
