"""What the probe-fitting kinds share: nested grouped cross-validation's folds and grid."""

from __future__ import annotations

from app.errors import InvalidInput
from app.stats.probes import LAMBDAS


def default_lambdas() -> list[float]:
    """The default grid of ``lam`` in ``mean log-loss + lam * ||w||^2`` (a fresh list)."""
    return list(LAMBDAS)


def check_cv(outer: int, inner: int, seed: int, lambdas: list[float]) -> None:
    """Fold counts of at least 2, a seed of 0 or more, a non-empty grid of positive lambdas.

    Raises
    ------
    InvalidInput
        Naming the first field out of range.

    """
    if outer < 2:
        raise InvalidInput("needs at least 2 outer folds", field="outer")
    if inner < 2:
        raise InvalidInput("needs at least 2 inner folds", field="inner")
    if seed < 0:
        raise InvalidInput("must be 0 or more", field="seed")
    if not lambdas or any(not lam > 0 for lam in lambdas):
        raise InvalidInput("needs positive regularisation strengths", field="lambdas")
