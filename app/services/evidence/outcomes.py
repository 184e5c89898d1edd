"""Review outcomes of choice and answer items that no option (or answer text) can express.

A reviewer who finds that an item has no correct option, several, or an unclear question
records it as the value of the item's ``reference`` label. Such an item is unanswerable: it
leaves the answer metrics and the corrected export (its changelog row names the outcome).
"""

from __future__ import annotations

__all__ = ["UNANSWERABLE", "is_unanswerable"]

UNANSWERABLE: tuple[str, ...] = ("no correct option", "several correct", "question unclear")
"""Outcomes a reviewer can give a choice or answer item instead of an option or answer."""


def is_unanswerable(value: str | None) -> bool:
    """Whether a label value is one of the :data:`UNANSWERABLE` outcomes."""
    return value in UNANSWERABLE
