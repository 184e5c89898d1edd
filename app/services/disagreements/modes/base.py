"""What a disagreement mode declares (parameters, detectors, label use, ranking) and the registry.

A mode is one class registered with :func:`register_mode`; the query parser, the page's form,
the CSV, the API, the CLI and queue sources all read these declarations.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from app.errors import InvalidInput
from app.services.disagreements.modes.inputs import ModeInput, ParamValue

__all__ = [
    "DEFAULT_MIN_CONFIDENCE",
    "DetectorKind",
    "DetectorSpec",
    "Disagreement",
    "DisagreementMode",
    "LabelUse",
    "ModeInput",
    "Param",
    "ParamKind",
    "ParamValue",
    "all_modes",
    "confidence_rank",
    "get_mode",
    "min_confidence_param",
    "modes_declaring",
    "register_mode",
]

DEFAULT_MIN_CONFIDENCE = 0.8
"""Default cut on the probability of the other class (threshold, consensus, detector-vs-judge)."""


class ParamKind(StrEnum):
    """How a parameter is typed, parsed and shown in the form."""

    NUMBER = "number"
    INTEGER = "integer"
    JUDGE = "judge"  # the name of a judge on the benchmark (a select of its judges)


@dataclass(frozen=True)
class Param:
    """One parameter a mode declares.

    ``low``/``high`` bound the value (inclusive unless ``low_open``); ``default`` is used when
    the parameter is unset (``None``: the mode runs without it); ``unset`` is what the form
    shows in an empty field; ``required`` parameters must be given before the mode runs.
    """

    name: str
    kind: ParamKind
    title: str
    help: str
    default: ParamValue | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    required: bool = False
    unset: str = ""

    @property
    def python_type(self) -> type[float] | type[int] | type[str]:
        """The Python type of a parsed value."""
        return {ParamKind.NUMBER: float, ParamKind.INTEGER: int, ParamKind.JUDGE: str}[self.kind]

    @property
    def placeholder(self) -> str:
        """What an empty form field shows: the default, or what unset means."""
        return self.unset or ("" if self.default is None else str(self.default))

    def parse(self, text: str) -> ParamValue:
        """The value of ``text`` (a query-string or CLI value), checked; InvalidInput if bad."""
        text = text.strip()
        try:
            value: ParamValue = self.python_type(text)
        except ValueError:
            what = {ParamKind.NUMBER: "a number", ParamKind.INTEGER: "a whole number"}
            raise InvalidInput(f"{self.name} must be {what[self.kind]}, got {text!r}") from None
        return self.check(value)

    def check(self, value: object) -> ParamValue:
        """``value`` if it has this parameter's type and lies within its bounds."""
        if isinstance(value, bool) or not isinstance(value, _ACCEPTED[self.kind]):
            raise InvalidInput(f"{self.name} must be {self.kind.value}, got {value!r}")
        if isinstance(value, str):
            return value
        low_ok = self.low is None or (value > self.low if self.low_open else value >= self.low)
        high_ok = self.high is None or value <= self.high
        if not (low_ok and high_ok) or (isinstance(value, float) and math.isnan(value)):
            raise InvalidInput(f"{self.name} must {self.bounds()}, got {value}")
        return value

    def bounds(self) -> str:
        """The bounds in words: ``lie in [0, 1]``, ``lie in (0, 0.5]`` or ``be >= 1``."""
        if self.low is not None and self.high is not None:
            return f"lie in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        if self.low is not None:
            return f"be {'>' if self.low_open else '>='} {self.low:g}"
        return "be finite" if self.high is None else f"be <= {self.high:g}"


_ACCEPTED: dict[ParamKind, type | tuple[type, ...]] = {
    ParamKind.NUMBER: (int, float),
    ParamKind.INTEGER: int,
    ParamKind.JUDGE: str,
}


def min_confidence_param(help: str, default: float | None = DEFAULT_MIN_CONFIDENCE) -> Param:
    """The ``min_confidence`` cut in [0, 1] that several modes declare, with their own help."""
    return Param(
        "min_confidence",
        ParamKind.NUMBER,
        "Min confidence",
        help,
        default=default,
        low=0.0,
        high=1.0,
        unset="" if default is not None else "none",
    )


class DetectorKind(StrEnum):
    """Which detectors a mode reads."""

    SCORED = "scored"  # detectors with scores, read as probabilities
    JUDGE = "judge"  # judges with judgments


class LabelUse(StrEnum):
    """What a mode does with the label set."""

    BINARY = "binary"  # compares with a binary label set (scores read as P(positive class))
    SHOWN = "shown"  # any label set; its current value is only shown beside each item


@dataclass(frozen=True)
class DetectorSpec:
    """How many detectors a mode takes (one, or one or more) and of which kind."""

    kind: DetectorKind
    many: bool = False

    def describe(self) -> str:
        """``one scored detector``, ``one or more scored detectors``, ``one judge``."""
        noun = "scored detector" if self.kind is DetectorKind.SCORED else "judge"
        return f"one or more {noun}s" if self.many else f"one {noun}"

    def check(self, mode: str, names: Sequence[str]) -> None:
        """InvalidInput unless ``names`` (distinct) is a number of detectors the mode takes."""
        if not names:
            raise InvalidInput("name at least one detector")
        if not self.many and len(names) != 1:
            raise InvalidInput(f"{mode} mode takes exactly one detector, got {len(names)}")


@dataclass(frozen=True)
class Disagreement:
    """One ranked item.

    ``score`` is the detector's score behind the item and ``confidence`` how strongly the item
    disagrees; each mode's class says what both are for it. ``rank`` is the mode's rank key (smaller
    first; modes add secondary keys for items of equal confidence); remaining ties go by external
    id, so the order is stable. It is empty on listed items, which are read from the kept ranked
    list (:mod:`app.services.disagreements.disagreement_results`). ``preview`` (the start of the
    prompt or text) and ``slices`` (payload slice fields) are filled in for listed items only
    (:func:`app.services.disagreements.modes.previews.with_previews`).
    """

    instance_id: int
    external_id: str
    label: str | None
    score: float | None
    confidence: float | None
    reason: str
    rank: tuple[float, ...] = field(default=(), repr=False, compare=False)
    # Structured evidence behind the item, where a mode has some (e.g. the models' votes).
    evidence: dict[str, Any] | None = None
    preview: str = field(default="", compare=False)
    slices: dict[str, str] = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """The JSON item of ``appellate disagreements --json`` (``evidence`` when present)."""
        out = {
            "external_id": self.external_id,
            "label": self.label,
            "score": self.score,
            "confidence": self.confidence,
            "reason": self.reason,
        }
        if self.evidence is not None:
            out["evidence"] = self.evidence
        return out


def confidence_rank(confidence: float | None) -> tuple[float, ...]:
    """Rank key of the confidence-ranked modes: most confident first, unknown confidence last."""
    return (confidence is None, -(confidence or 0.0))


class DisagreementMode(ABC):
    """A kind of disagreement list: what it declares and how it finds and ranks items.

    Subclasses set the class attributes and implement :meth:`find`; :func:`register_mode`
    makes them available everywhere by ``name``.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    help: ClassVar[str]
    order: ClassVar[int]  # position in menus and help texts
    # Unless a mode says otherwise, it reads one scored detector and only shows the label set.
    detectors: ClassVar[DetectorSpec] = DetectorSpec(DetectorKind.SCORED)
    labels: ClassVar[LabelUse] = LabelUse.SHOWN
    params: ClassVar[tuple[Param, ...]] = ()
    # Benchmark kinds the mode lists items of (``None``: every kind).
    benchmark_kinds: ClassVar[tuple[str, ...] | None] = None
    # Raised when the mode's order changes for the same data: lists kept under an older
    # revision are then not served (it is part of the kept list's key when non-zero).
    ranking_revision: ClassVar[int] = 0

    def applies_to(self, kind: str) -> bool:
        """Whether the mode lists items of benchmarks of ``kind``."""
        return self.benchmark_kinds is None or kind in self.benchmark_kinds

    def param(self, name: str) -> Param | None:
        """The declared parameter called ``name``, or ``None``."""
        return next((p for p in self.params if p.name == name), None)

    def settle(
        self, detectors: Sequence[str], values: Mapping[str, ParamValue]
    ) -> dict[str, ParamValue | None]:
        """Every declared parameter's effective value: the given one, else its default.

        Raises InvalidInput when a required parameter is missing. Modes whose defaults or
        bounds depend on the detectors extend this.
        """
        out: dict[str, ParamValue | None] = {}
        for p in self.params:
            value = values.get(p.name, p.default)
            if value is None and p.required:
                raise InvalidInput(f"{self.name} mode needs a {p.name}")
            out[p.name] = value
        return out

    def missing(self, detectors: Sequence[str], values: Mapping[str, ParamValue]) -> list[str]:
        """What must still be chosen before the mode can run (empty when it can)."""
        out = [] if detectors else [f"a detector ({self.detectors.describe()})"]
        out += [f"a {p.name}" for p in self.params if p.required and p.name not in values]
        return out

    @abstractmethod
    def find(self, inp: ModeInput) -> list[Disagreement]:
        """The disagreeing items, each with its :attr:`Disagreement.rank`, in any order."""

    def rank(self, found: list[Disagreement]) -> list[Disagreement]:
        """``found`` in rank order: by each item's rank key, ties by external id."""
        return sorted(found, key=lambda d: (d.rank, d.external_id))


_REGISTRY: dict[str, DisagreementMode] = {}
M = TypeVar("M", bound=type[DisagreementMode])


def register_mode(cls: M) -> M:
    """Class decorator: make mode ``cls`` available by its ``name`` (once per name)."""
    if cls.name in _REGISTRY:
        raise ValueError(f"disagreement mode {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls()
    return cls


def all_modes() -> list[DisagreementMode]:
    """Every registered mode, in menu order."""
    return sorted(_REGISTRY.values(), key=lambda m: (m.order, m.name))


def get_mode(name: str) -> DisagreementMode:
    """The mode called ``name``; InvalidInput naming the choices if there is none."""
    mode = _REGISTRY.get(name)
    if mode is None:
        choices = [m.name for m in all_modes()]
        raise InvalidInput(f"unknown mode {name!r}; choose from {choices}")
    return mode


def modes_declaring(name: str) -> list[DisagreementMode]:
    """The modes that declare parameter ``name``, in menu order."""
    return [m for m in all_modes() if m.param(name) is not None]
