"""Domain errors raised by services and importers and mapped to HTTP and CLI messages."""

from __future__ import annotations


class AppellateError(Exception):
    """Base class of every error a user is meant to read.

    ``file``, ``line`` and ``field`` say where, when the error comes from input; ``message`` is
    then ``file:line: field: reason``.
    """

    def __init__(
        self,
        reason: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.reason = reason
        self.file = file
        self.line = line
        self.field = field
        super().__init__(self.message)

    @property
    def message(self) -> str:
        """``file:line: field: reason`` with the parts that are known."""
        where = ""
        if self.file is not None:
            where = self.file if self.line is None else f"{self.file}:{self.line}"
        parts = [p for p in (where, self.field) if p]
        return ": ".join([*parts, self.reason])


class NotFound(AppellateError):
    """A named object does not exist."""


class Conflict(AppellateError):
    """The request contradicts what the store already holds."""


class InvalidInput(AppellateError):
    """Input is malformed."""
