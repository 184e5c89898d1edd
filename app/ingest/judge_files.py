"""What the importers of published judge outputs share: input files, judge detectors, rows."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.readers import Row
from app.services.evidence.detectors import ensure_detector

__all__ = ["JudgeDetectors", "input_files", "number", "text_list"]


def input_files(
    paths: Sequence[str | os.PathLike[str]],
    pattern: str | Sequence[str],
    *,
    recursive: bool = False,
) -> list[Path]:
    """The files named by ``paths``: files as given, folders as their files matching ``pattern``.

    ``pattern`` is a glob or several; a folder's matches are sorted (``recursive``: its
    subfolders searched too), so an import of a folder is deterministic.

    Raises
    ------
    InvalidInput
        A folder without a matching file, or no path at all.

    """
    if not paths:
        raise InvalidInput("no input files given", field="paths")
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    out: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            search = path.rglob if recursive else path.glob
            found = sorted({p for glob in patterns for p in search(glob) if p.is_file()})
            if not found:
                where = " (subfolders included)" if recursive else ""
                names = " or ".join(patterns)
                raise InvalidInput(f"no {names} files in this folder{where}", file=str(path))
            out.extend(found)
        else:
            out.append(path)
    return out


def number(value: Any) -> float | None:
    """``value`` as a float if it is a finite JSON number (never a boolean), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    as_float = float(value)
    return as_float if as_float == as_float and abs(as_float) != float("inf") else None


def text_list(row: Row, field: str, length: int) -> list[str]:
    """``row[field]`` as a list of exactly ``length`` strings (e.g. FastChat's ``judge``)."""
    value = row.require(field)
    if (
        not isinstance(value, list)
        or len(value) != length
        or not all(isinstance(v, str) and v for v in value)
    ):
        raise row.error(field, f"expected a list of {length} non-empty strings, got {value!r}")
    return value


@dataclass
class JudgeDetectors:
    """The detectors ``<protocol>/<judge>`` of one import, created when first met.

    ``protocol`` names how the judge was prompted (``fastchat_pair``, ``arena_hard``, ...), as
    the JudgeBench importer names its judges (``arena_hard/o1-mini-...``). A ``/`` in the
    judge's own name becomes ``_``, as JudgeBench's file names write it.
    """

    session: Session
    protocol: str
    details: dict[str, Any] = field(default_factory=dict)
    two_orders: bool = True
    _ids: dict[str, int] = field(default_factory=dict)

    def name(self, judge: str) -> str:
        """The detector name of ``judge``."""
        return f"{self.protocol}/{judge.replace('/', '_')}"

    def id(self, judge: str, source: str | os.PathLike[str]) -> int:
        """The detector id of ``judge`` (created with ``details`` and its first file's name)."""
        found = self._ids.get(judge)
        if found is None:
            detector = ensure_detector(
                self.session,
                self.name(judge),
                "judge",
                details={**self.details, "judge": judge, "imported_from": Path(source).name},
            )
            found = self._ids[judge] = detector.id
        return found

    @property
    def ids(self) -> list[int]:
        """Every detector met so far."""
        return sorted(self._ids.values())

    @property
    def flip_judges(self) -> list[int]:
        """The detectors whose flips the import derives: those of a two-order protocol."""
        return self.ids if self.two_orders else []
