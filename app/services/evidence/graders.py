r"""Graders of short answers: whether a model's answer matches an item's reference answer.

A grader is named by a spec string: ``exact``, ``normalized`` (SQuAD-style: case,
punctuation, articles and whitespace ignored), ``numeric`` or ``numeric:TOL`` (the last number
of each text, equal within an absolute tolerance, default 1e-6) and ``regex:PATTERN`` (the
last match of PATTERN in the answer, its first group if it has one, compared with the
reference after normalisation; e.g. ``regex:####\s*(.+)`` for GSM8K-style answers).
"""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.errors import Conflict
from app.tables import Benchmark

__all__ = ["GRADER_NAMES", "Grader", "benchmark_grader", "parse_grader", "set_grader"]

GRADER_NAMES: tuple[str, ...] = ("exact", "normalized", "numeric", "regex")
DEFAULT_TOLERANCE = 1e-6
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
# Thousands separators are allowed inside the integer part ("1,234.5").
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (SQuAD's ``normalize_answer``)."""
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION))
    return " ".join(text.split())


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (thousands separators allowed), or None."""
    for match in reversed(_NUMBER.findall(text)):
        try:
            value = float(match.replace(",", ""))
        except ValueError:
            continue
        if math.isfinite(value):
            return value
    return None


@dataclass(frozen=True)
class Grader:
    """A parsed grader spec; :meth:`grade` says whether an answer matches a reference."""

    spec: str
    kind: str
    tolerance: float = DEFAULT_TOLERANCE
    pattern: re.Pattern[str] | None = None

    def grade(self, answer: str, reference: str) -> bool:
        """Whether ``answer`` counts as ``reference`` under this grader."""
        if self.kind == "exact":
            return answer.strip() == reference.strip()
        if self.kind == "normalized":
            return normalize_answer(answer) == normalize_answer(reference)
        if self.kind == "numeric":
            got, want = last_number(answer), last_number(reference)
            return got is not None and want is not None and abs(got - want) <= self.tolerance
        assert self.pattern is not None
        matches = list(self.pattern.finditer(answer))
        if not matches:
            return False
        last = matches[-1]
        extracted = last.group(1) if self.pattern.groups else last.group(0)
        return normalize_answer(extracted or "") == normalize_answer(reference)


def parse_grader(spec: str) -> Grader:
    """The grader named by ``spec`` (see the module docstring).

    Raises
    ------
    ValueError
        For an unknown grader, a tolerance that is not a finite non-negative number, or a
        regular expression that does not compile.

    """
    name, sep, arg = spec.partition(":")
    if name in ("exact", "normalized") and not sep:
        return Grader(spec, name)
    if name == "numeric":
        tolerance = DEFAULT_TOLERANCE
        if sep:
            try:
                tolerance = float(arg)
            except ValueError:
                tolerance = math.nan
            if not math.isfinite(tolerance) or tolerance < 0:
                raise ValueError(f"numeric tolerance must be a finite number >= 0, got {arg!r}")
        return Grader(spec, name, tolerance=tolerance)
    if name == "regex" and sep and arg:
        try:
            return Grader(spec, name, pattern=re.compile(arg))
        except re.error as exc:
            raise ValueError(f"regex {arg!r} does not compile: {exc}") from None
    raise ValueError(
        f"unknown grader {spec!r}: use exact, normalized, numeric[:TOL] or regex:PATTERN"
    )


GRADER_KEY = "grader"
DEFAULT_GRADER = "normalized"


def set_grader(session: Session, benchmark: Benchmark, spec: str) -> Grader:
    """Record the grader of an answer benchmark (once; another one later is a conflict).

    Raises
    ------
    ValueError
        For a malformed spec.
    Conflict
        When the benchmark already grades with another spec.

    """
    grader = parse_grader(spec)
    current = (benchmark.details or {}).get(GRADER_KEY)
    if current is not None and current != spec:
        raise Conflict(
            f"benchmark {benchmark.name!r} grades answers with {current!r}, not {spec!r}",
            field="grader",
        )
    if current is None:
        benchmark.details = {**(benchmark.details or {}), GRADER_KEY: spec}
        session.flush()
    return grader


def benchmark_grader(benchmark: Benchmark) -> Grader:
    """The grader of an answer benchmark (``normalized`` when none was recorded)."""
    return parse_grader((benchmark.details or {}).get(GRADER_KEY, DEFAULT_GRADER))
