"""Nested field paths of ``appellate import table --map``: ``doc.question``, ``doc.choices.0``.

A path is a column (or JSON key) followed by steps into the value: ``.name`` for an object's
key, ``.N`` or ``[N]`` for a list's item (0-based). ``doc.choices.0`` and ``doc.choices[0]``
name the same value; ``.N`` on an object reads its key ``"N"``.

A name that is itself a column or key is read as such, dots and all: tables flattened by
pandas (``json_normalize``) have columns called ``doc.question``, and those keep working.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.ingest.readers import type_name

__all__ = ["FieldPath", "PathMissing", "parse_path"]

# A step: ".key" (anything but dots and brackets) or "[N]".
_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")
_HEAD = re.compile(r"[^.\[\]]+")


class PathMissing(KeyError):
    """A path that does not lead to a value in one row; ``reason`` says where it stopped."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_path(text: str) -> tuple[str | int, ...]:
    """The steps of ``text``: its first key, then keys (str) and list indices (int).

    Raises
    ------
    ValueError
        An empty step, an unclosed bracket or a bracket holding other than digits.

    """
    head = _HEAD.match(text)
    if head is None:
        raise ValueError(f"{text!r} is not a column or path (e.g. doc.question, doc.choices[0])")
    steps: list[str | int] = [head.group()]
    pos = head.end()
    while pos < len(text):
        step = _STEP.match(text, pos)
        if step is None:
            raise ValueError(
                f"{text!r} is not a path: expected .key, .N or [N] at character {pos + 1}"
            )
        key, index = step.groups()
        steps.append(int(index) if index is not None else key)
        pos = step.end()
    return tuple(steps)


@dataclass(frozen=True)
class FieldPath:
    """A column name or nested path, read from each row's data (see the module docstring)."""

    text: str
    steps: tuple[str | int, ...]

    @classmethod
    def of(cls, text: str) -> FieldPath:
        """Parse ``text`` (a malformed path is taken as a plain column name)."""
        try:
            steps = parse_path(text)
        except ValueError:
            steps = (text,)
        return cls(text, steps)

    @property
    def nested(self) -> bool:
        """Whether the path steps into a column's value."""
        return len(self.steps) > 1

    @property
    def root(self) -> str:
        """The column the path starts from."""
        return str(self.steps[0])

    def column(self, columns: list[str] | None) -> str | None:
        """The column of a table with known ``columns`` this reads, or None when there is none.

        The whole name first (a column called ``doc.question``), then the path's first key.
        """
        if columns is None or self.text in columns:
            return self.text
        return self.root if self.nested and self.root in columns else None

    def get(self, data: Mapping[str, Any]) -> Any:
        """The value at this path in ``data``.

        Raises
        ------
        PathMissing
            Where the path does not lead to a value (a KeyError: callers treat it as missing).

        """
        if self.text in data or not self.nested:
            if self.text not in data:
                raise PathMissing("missing field")
            return data[self.text]
        value: Any = data
        walked = ""
        for step in self.steps:
            value = self._step(value, step, walked)
            walked = self._join(walked, step)
        return value

    @staticmethod
    def _join(walked: str, step: str | int) -> str:
        if not walked:
            return str(step)
        return f"{walked}[{step}]" if isinstance(step, int) else f"{walked}.{step}"

    @staticmethod
    def _step(value: Any, step: str | int, walked: str) -> Any:
        where = f" in {walked}" if walked else ""
        if isinstance(value, Mapping):
            key = str(step)
            if key not in value:
                raise PathMissing(f"no key {key!r}{where}")
            return value[key]
        if isinstance(value, list | tuple) and (isinstance(step, int) or step.isdigit()):
            index = int(step)
            if index >= len(value):
                raise PathMissing(f"no item {index}{where} (a list of {len(value)})")
            return value[index]
        wanted = "a list" if isinstance(step, int) or step.isdigit() else "an object"
        raise PathMissing(f"{walked} is {type_name(value)}, not {wanted}: no {step!r} in it")
