"""The estimability gate of a flip probe: refuse a fit whose folds cannot support it.

A probe of a judge that almost never (or almost always) flips learns the base rate, and its
AUROC rests on a handful of positives; the flip paper's analysis fits none when the flip rate
is under 5% or over 95%. A fold whose training part holds one class cannot be fitted at all,
and one whose test part holds one class adds nothing to the ranking it is scored on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from app.stats import _validate
from app.stats.cv_splits import Split

__all__ = ["MAX_FLIP_RATE", "MIN_FLIP_RATE", "probe_refusal"]

MIN_FLIP_RATE = 0.05
"""Lowest flip rate of the training data a probe is fitted on."""

MAX_FLIP_RATE = 0.95
"""Highest flip rate of the training data a probe is fitted on."""


def probe_refusal(
    y: ArrayLike,
    splits: Sequence[Split],
    *,
    low: float = MIN_FLIP_RATE,
    high: float = MAX_FLIP_RATE,
) -> str | None:
    """Why a flip probe must not be fitted on these labels and folds, or ``None``.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Flip labels of the analysis set.
    splits : sequence of (ndarray of int, ndarray of int)
        The outer ``(train_idx, test_idx)`` folds.
    low, high : float
        The flip-rate range a probe is fitted within (inclusive).

    Returns
    -------
    str or None
        The first reason found, e.g. ``"flip rate 2.0% (1 of 50) is outside 5-95%"`` or
        ``"outer fold 3: the training part holds no flip"``; ``None`` when every check passes.

    """
    labels = _validate.labels(y)
    rate = float(labels.mean())
    if not low <= rate <= high:
        return (
            f"flip rate {100 * rate:.1f}% ({int(labels.sum())} of {labels.size}) is outside "
            f"{100 * low:g}-{100 * high:g}%"
        )
    for k, (train_idx, test_idx) in enumerate(splits):
        for part, idx in (("training", train_idx), ("test", test_idx)):
            chosen = labels[np.asarray(idx, dtype=np.intp)]
            if not chosen.any():
                return f"outer fold {k}: the {part} part holds no flip"
            if chosen.all():
                return f"outer fold {k}: the {part} part holds only flips"
        train_rate = float(labels[np.asarray(train_idx, dtype=np.intp)].mean())
        if not low <= train_rate <= high:
            return (
                f"outer fold {k}: the training flip rate {100 * train_rate:.1f}% is outside "
                f"{100 * low:g}-{100 * high:g}%"
            )
    return None
