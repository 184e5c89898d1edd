"""The normalised records every importer produces, and the counts an import reports."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(slots=True)
class JudgmentIn:
    """One imported judge call; ``choice`` is already an identity (never a slot)."""

    detector_id: int
    order: str
    choice: str
    raw_output: str
    details: dict[str, Any]
    confidence: float | None = None
    # Where it came from in the input, for messages (e.g. "judgments[1]").
    field: str = "judgments"


@dataclass(slots=True)
class ScoreIn:
    """One imported detector score for the record's instance."""

    detector_id: int
    score: float
    details: dict[str, Any]
    field: str = "score"


@dataclass(slots=True)
class PredictionIn:
    """One imported categorical answer of a detector (an option letter or an answer text)."""

    detector_id: int
    answer: str
    probabilities: dict[str, float] | None
    details: dict[str, Any]
    field: str = "answer"


@dataclass(slots=True)
class Record:
    """One instance as an importer read it, with its labels, scores and judgments."""

    line: int
    external_id: str
    group_key: str
    payload: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)
    scores: list[ScoreIn] = field(default_factory=list)
    judgments: list[JudgmentIn] = field(default_factory=list)
    # A shared empty tuple by default: most records have no predictions, and a list each
    # would cost memory per buffered record.
    predictions: Sequence[PredictionIn] = ()


@dataclass(frozen=True)
class SourceFields:
    """Names of the input fields behind each part of a record, so messages name the user's field."""

    external_id: str = "id"
    group_key: str = "group"
    payload: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def of_payload(self, key: str) -> str:
        """The input field behind payload field ``key``."""
        return self.payload.get(key, key)

    def of_label(self, name: str) -> str:
        """The input field behind label set ``name``."""
        return self.labels.get(name, name)


@dataclass
class ImportCounts:
    """What an import added, and what it found already present (skipped)."""

    instances_added: int = 0
    instances_skipped: int = 0
    labels_added: int = 0
    labels_skipped: int = 0
    judgments_added: int = 0
    judgments_skipped: int = 0
    scores_added: int = 0
    scores_skipped: int = 0
    predictions_added: int = 0
    predictions_skipped: int = 0

    @property
    def added(self) -> int:
        """Rows of any kind added."""
        return self.instances_added + self.evidence_added

    @property
    def evidence_added(self) -> int:
        """Labels, judgments, scores and predictions added: what changes derived numbers."""
        return self.labels_added + self.judgments_added + self.scores_added + self.predictions_added

    def add(self, other: ImportCounts) -> None:
        """Accumulate ``other`` into these counts."""
        for f in fields(ImportCounts):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        """The counts as plain JSON data."""
        return {f.name: getattr(self, f.name) for f in fields(ImportCounts)}


NAMED_FILES = 3
"""Files an import line names; more are counted."""


def _file_names(files: list[str]) -> str:
    """``a.csv, b.csv`` (base names), or the first few and how many more."""
    names = [os.path.basename(f) or f for f in files]
    if len(names) <= NAMED_FILES:
        return ", ".join(names)
    return f"{', '.join(names[:NAMED_FILES])} and {len(names) - NAMED_FILES} more"


@dataclass
class ImportSummary(ImportCounts):
    """The result of one importer call: counts summed over its files, plus derived changes."""

    benchmark: str = ""
    files: list[str] = field(default_factory=list)
    # Label events appended by recomputing derived labels (flips) after judgments arrived.
    derived_labels: int = 0
    # Input rows that could not become an instance (e.g. a model without an answer).
    ignored: int = 0
    data_version: int = 0

    def merge(self, later: ImportSummary) -> None:
        """Fold in the summary of a later import into the same benchmark."""
        self.add(later)
        self.files.extend(later.files)
        self.derived_labels += later.derived_labels
        self.ignored += later.ignored
        self.benchmark, self.data_version = later.benchmark, later.data_version

    def line(self) -> str:
        """A one-line human summary for the CLI."""
        parts = [
            f"{self.benchmark}: {len(self.files)} file(s)",
            f"instances +{self.instances_added} ({self.instances_skipped} present)",
            f"labels +{self.labels_added} ({self.labels_skipped} present)",
            f"judgments +{self.judgments_added} ({self.judgments_skipped} present)",
            f"scores +{self.scores_added} ({self.scores_skipped} present)",
        ]
        if self.predictions_added or self.predictions_skipped:
            parts.append(
                f"predictions +{self.predictions_added} ({self.predictions_skipped} present)"
            )
        parts.append(f"derived labels +{self.derived_labels}")
        if self.ignored:
            parts.append(f"{self.ignored} ignored")
        parts.append(f"data version {self.data_version}")
        if self.files:
            parts.append(f"from {_file_names(self.files)}")
        return "; ".join(parts)

    def __str__(self) -> str:
        return self.line()
