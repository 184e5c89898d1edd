"""A streaming reader of files holding one JSON array of objects (AlpacaEval's annotations.json).

Memory follows the largest element; each row is located at the line its element starts on.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from app.errors import InvalidInput
from app.ingest.progress import open_binary
from app.ingest.readers import RECORD, Row, Table, display_name, type_name
from app.sql.json_paths import nesting_depth
from app.sql.storable import MAX_NESTING, find_unstorable

__all__ = ["open_json_array"]

READ_BYTES = 1 << 20
_SPACE = re.compile(r"[ \t\r\n]*")
# As in app.ingest.readers: NUL and surrogates can only come from \u escapes in valid JSON.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


@contextmanager
def open_json_array(
    path: str | os.PathLike[str], *, required: Sequence[str] = ()
) -> Iterator[Table]:
    """Open a JSON-array file for streaming its objects as rows.

    Parameters
    ----------
    path
        A file whose whole content is one JSON array of objects.
    required
        Fields every object must have (checked row by row).

    Raises
    ------
    InvalidInput
        A missing file, content that is not an array of objects, malformed JSON, invalid
        UTF-8, text the store cannot hold, nesting deeper than the store allows, an empty
        array: each located at its line.

    """
    name = display_name(path)
    if not Path(path).is_file():
        raise InvalidInput("no such file", file=name)
    with open_binary(path) as fh:
        yield Table(name, "json", None, lambda _only: _rows(_Buffer(fh, name), name, required))


class _Buffer:
    """Decoded text of a binary file, read on demand, with the line number of a position."""

    def __init__(self, fh: IO[bytes], name: str) -> None:
        self.fh = fh
        self.name = name
        self.text = ""
        self.pos = 0
        self.line = 1  # the line of self.pos
        self.eof = False
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._first = True

    def more(self, at_least: int = READ_BYTES) -> bool:
        """Append at least ``at_least`` more bytes' worth of text; False at the end of the file."""
        if self.eof:
            return False
        raw = self.fh.read(max(at_least, READ_BYTES))
        if self._first:
            self._first = False
            raw = raw.removeprefix(codecs.BOM_UTF8)
        try:
            decoded = self._decoder.decode(raw, final=not raw)
        except UnicodeDecodeError as exc:
            # The bad byte's line: newlines held so far, plus those before it in this block.
            line = self.line + self.text.count("\n", self.pos) + raw.count(b"\n", 0, exc.start)
            raise InvalidInput(
                f"invalid UTF-8 (byte 0x{exc.object[exc.start]:02x})",
                file=self.name,
                line=line,
                field=RECORD,
            ) from None
        if not raw:
            self.eof = True
        if self.pos > READ_BYTES:
            self.text = self.text[self.pos :]  # drop what was consumed; keeps the buffer bounded
            self.pos = 0
        self.text += decoded
        return bool(raw)

    def advance(self, to: int) -> None:
        """Move to ``to``, counting the lines passed."""
        self.line += self.text.count("\n", self.pos, to)
        self.pos = to

    def skip_space(self) -> str:
        """Skip whitespace (reading on as needed); the next character, or "" at the end."""
        while True:
            end = _SPACE.match(self.text, self.pos)
            assert end is not None  # the pattern matches the empty string
            self.advance(end.end())
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""

    def error(self, reason: str, at: int | None = None) -> InvalidInput:
        """An InvalidInput at the line of position ``at`` (default: the current position)."""
        line = self.line if at is None else self.line + self.text.count("\n", self.pos, at)
        return InvalidInput(reason, file=self.name, line=line, field=RECORD)


def _decode(buf: _Buffer, decoder: json.JSONDecoder) -> tuple[Any, int]:
    """The next JSON value at ``buf.pos`` and where it ends, reading on until it is complete."""
    while True:
        try:
            value, end = decoder.raw_decode(buf.text, buf.pos)
        except RecursionError:
            raise buf.error(f"nested deeper than {MAX_NESTING} levels") from None
        except json.JSONDecodeError as exc:
            # A value cut by the end of the buffer reads as malformed: read on (twice as much
            # each time, so a huge element costs linear time) before believing it.
            if buf.more(len(buf.text) - buf.pos):
                continue
            raise buf.error(
                f"malformed JSON: {exc.msg} (column {_column(buf.text, exc.pos)})", exc.pos
            ) from None
        # A number at the very end of the buffer may go on in the next block.
        if end == len(buf.text) and not isinstance(value, dict | list | str) and buf.more():
            continue
        return value, end


def _column(text: str, pos: int) -> int:
    return pos - (text.rfind("\n", 0, pos) + 1) + 1


def _rows(buf: _Buffer, name: str, required: Sequence[str]) -> Iterator[Row]:
    decoder = json.JSONDecoder()
    first = buf.skip_space()
    if first != "[":
        hint = " (this looks like JSON Lines: one object per line)" if first == "{" else ""
        raise buf.error(f"expected a JSON array{hint}")
    buf.advance(buf.pos + 1)
    index = 0
    while True:
        nxt = buf.skip_space()
        if nxt == "]" and index == 0:
            raise buf.error("empty file: no records")
        if nxt == "":
            raise buf.error("malformed JSON: the array is not closed")
        line = buf.line
        value, end = _decode(buf, decoder)
        # Read after decoding: reading on may have dropped consumed text and moved buf.pos.
        element = buf.text[buf.pos : end]
        if element.count("[") + element.count("{") > MAX_NESTING and (
            nesting_depth(value, MAX_NESTING) > MAX_NESTING
        ):
            raise buf.error(f"nested deeper than {MAX_NESTING} levels")
        if _SUSPECT_ESCAPE.search(element) and (found := find_unstorable(value, root=RECORD)):
            raise InvalidInput(found[1], file=name, line=line, field=found[0])
        if not isinstance(value, dict):
            raise buf.error(f"expected a JSON object, got {type_name(value)}")
        buf.advance(end)
        index += 1
        row = Row(name, line, index, value)
        for field in required:
            row.require(field)
        yield row
        after = buf.skip_space()
        if after == "]":
            buf.advance(buf.pos + 1)
            if buf.skip_space():
                raise buf.error("unexpected content after the JSON array")
            return
        if after != ",":
            raise buf.error(
                "malformed JSON: expected ',' or ']' after an array element"
                if after
                else "malformed JSON: the array is not closed"
            )
        buf.advance(buf.pos + 1)
