"""The binary-target rule: how a label set's values become 0/1 for metrics and disagreements."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from app.errors import InvalidInput

__all__ = ["KNOWN_TARGETS", "BinaryTarget", "binary_target"]

# Known two-class vocabularies, positive class first. `reference` on pairwise benchmarks says
# which response is correct and scores are P(A is better), so "A" is positive; flip and truth
# label sets are "1"/"0" and scores are P(flip) / P(true), so "1" is positive.
KNOWN_TARGETS: tuple[tuple[str, str], ...] = (("A", "B"), ("1", "0"))


@dataclass(frozen=True)
class BinaryTarget:
    """How a label set becomes a 0/1 target: ``positive`` -> 1, ``negative`` -> 0.

    Detector scores are read as the probability of ``positive``; items whose label is neither
    class are left out of every metric.
    """

    label: str
    positive: str
    negative: str | None
    rule: str

    def encode(self, value: str | None) -> int | None:
        """1, 0, or None for a value outside the two classes."""
        if value == self.positive:
            return 1
        if value is not None and value == self.negative:
            return 0
        return None

    def other(self, value: str) -> str:
        """The class opposite to ``value`` (``"not X"`` when the set holds one class only)."""
        if value == self.positive:
            return self.negative if self.negative is not None else f"not {self.positive}"
        return self.positive


def binary_target(label: str, values: Collection[str], positive: str | None = None) -> BinaryTarget:
    """The binary target of label set ``label`` whose current values are ``values``.

    Rule: with ``positive`` given, that value is class 1 and the only other value (if any)
    class 0. Otherwise the values must lie in a known vocabulary: ``{"A", "B"}`` (positive
    ``"A"``, matching scores that are P(A is better)) or ``{"1", "0"}`` (positive ``"1"``).

    Parameters
    ----------
    label : str
        Label set name (for messages).
    values : collection of str
        The distinct current values of the label set.
    positive : str, optional
        Explicit positive class.

    Returns
    -------
    BinaryTarget

    Raises
    ------
    InvalidInput
        If the label set has more than two values, or none in a known vocabulary and no
        ``positive`` is given, or ``positive`` is not one of its values.

    """
    distinct = sorted(set(values))
    if positive is not None:
        others = [v for v in distinct if v != positive]
        if positive not in distinct or len(others) > 1:
            raise InvalidInput(
                f"label set {label!r} has values {distinct}; positive={positive!r} must be one "
                "of exactly two classes"
            )
        negative = others[0] if others else None
        return BinaryTarget(label, positive, negative, f"{positive!r} = 1 (given), else 0")
    for pos, neg in KNOWN_TARGETS:
        if set(distinct) <= {pos, neg}:
            return BinaryTarget(
                label, pos, neg, f"{pos!r} = 1, {neg!r} = 0; scores read as P({pos})"
            )
    raise InvalidInput(
        f"label set {label!r} has values {distinct[:10]}: not a known binary vocabulary "
        "(A/B or 1/0); name the positive class"
    )
