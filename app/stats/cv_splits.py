"""Grouped cross-validation splits for the probes: no group ever on both sides of a split.

All variants of one question (or any other grouping unit) must fall on the same side of every
split, or a probe could be scored on an item whose near-duplicate it was trained on. The splits
are stratified by label whenever every fold can hold both classes, and are fully determined by an
explicit integer seed, so a rerun (or a baseline run on the probe's folds) sees identical folds.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.model_selection import GroupKFold, StratifiedGroupKFold

from app.stats import _validate

__all__ = [
    "Split",
    "check_splits",
    "grouped_folds",
    "inner_seed",
    "strata_folds",
    "stratification_possible",
]

Split = tuple[NDArray[np.intp], NDArray[np.intp]]
"""One ``(train_idx, test_idx)`` pair of sorted item indices."""


def _split_count(n_splits: int, name: str = "n_splits") -> int:
    if isinstance(n_splits, bool) or not isinstance(n_splits, int | np.integer) or n_splits < 2:
        raise ValueError(f"{name} must be an integer >= 2, got {n_splits!r}")
    return int(n_splits)


def stratification_possible(y: NDArray[np.bool_], codes: NDArray[np.intp], n_splits: int) -> bool:
    """Whether every one of ``n_splits`` folds can hold a group of each class.

    Parameters
    ----------
    y : ndarray of bool, shape (n,)
        Binary labels.
    codes : ndarray of int, shape (n,)
        Group codes ``0..k-1``.
    n_splits : int
        Number of folds.

    Returns
    -------
    bool
        True when at least ``n_splits`` groups contain a positive item and at least ``n_splits``
        groups contain a negative item.

    """
    k = int(codes.max()) + 1 if codes.size else 0
    has_pos = np.bincount(codes[y], minlength=k) > 0
    has_neg = np.bincount(codes[~y], minlength=k) > 0
    return bool(has_pos.sum() >= n_splits and has_neg.sum() >= n_splits)


def _as_splits(test_folds: Sequence[ArrayLike], n: int) -> list[Split]:
    everything = np.arange(n, dtype=np.intp)
    out: list[Split] = []
    for test in test_folds:
        test_idx = np.sort(np.asarray(test, dtype=np.intp))
        mask = np.ones(n, dtype=bool)
        mask[test_idx] = False
        out.append((everything[mask], test_idx))
    return out


def grouped_folds(y: ArrayLike, groups: ArrayLike, n_splits: int, seed: int) -> list[Split]:
    """Grouped K-fold splits, stratified by label when every fold can hold both classes.

    Parameters
    ----------
    y : array-like of {0, 1} or bool, shape (n,)
        Binary labels (one class alone is allowed; the splits are then only grouped).
    groups : array-like, shape (n,)
        Group key of every item; all items of a group land in the same test fold.
    n_splits : int
        Number of folds, at least 2.
    seed : int
        Non-negative seed for the group shuffle (``random_state`` of the splitter).

    Returns
    -------
    list of (ndarray of intp, ndarray of intp)
        ``n_splits`` pairs ``(train_idx, test_idx)`` of sorted indices into the n items. Every
        index is in exactly one test fold, and no group is on both sides of any pair.

    Raises
    ------
    ValueError
        If the inputs are malformed or there are fewer groups than ``n_splits``.

    Notes
    -----
    ``StratifiedGroupKFold(shuffle=True, random_state=seed)`` is used when at least
    ``n_splits`` groups contain each class (:func:`stratification_possible`); otherwise (or in
    the unlikely case that its greedy assignment leaves a fold empty)
    ``GroupKFold(shuffle=True, random_state=seed)``, which deals the shuffled groups into
    ``n_splits`` near-equal batches. Group keys are factorised in sorted order first, so the
    folds do not depend on how the caller ordered its rows' keys.

    """
    labels = _validate.labels(y)
    n = labels.shape[0]
    codes, n_groups = _validate.keys(groups, n, "groups")
    n_splits = _split_count(n_splits)
    seed = _validate.seed_value(seed)
    if n_groups < n_splits:
        raise ValueError(
            f"cannot make {n_splits} grouped folds from {n_groups} groups: "
            "every fold needs at least one group of its own"
        )
    if stratification_possible(labels, codes, n_splits):
        splitter = StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
        tests = [test for _, test in splitter.split(np.zeros(n), labels, codes)]
        if all(len(test) > 0 for test in tests):
            return _as_splits(tests, n)
    splitter_g = GroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    return _as_splits([test for _, test in splitter_g.split(np.zeros(n), labels, codes)], n)


def strata_folds(strata: ArrayLike, groups: ArrayLike, n_splits: int, seed: int) -> list[Split]:
    """Grouped K-fold splits stratified by any item strata (e.g. slice x judges that flip).

    Parameters
    ----------
    strata : array-like, shape (n,)
        Stratum key of every item (hashable; e.g. ``"source::2"``).
    groups : array-like, shape (n,)
        Group key of every item; all items of a group land in the same test fold.
    n_splits : int
        Number of folds, at least 2.
    seed : int
        Non-negative seed of the group shuffle.

    Returns
    -------
    list of (ndarray of intp, ndarray of intp)
        ``n_splits`` pairs ``(train_idx, test_idx)`` of sorted indices: every item in exactly
        one test fold, no group on both sides of a pair.

    Raises
    ------
    ValueError
        If the inputs are malformed or there are fewer groups than ``n_splits``.

    Notes
    -----
    ``StratifiedGroupKFold(shuffle=True, random_state=seed)`` on the strata's codes when the
    largest stratum spans at least ``n_splits`` groups (else there is nothing to spread over
    the folds), otherwise, or when its greedy assignment leaves a fold empty,
    ``GroupKFold(shuffle=True, random_state=seed)``. Strata and groups are factorised in
    sorted order, so the folds do not depend on the order of the caller's rows' keys (only
    on which items carry which keys, in item order).

    """
    n_splits = _split_count(n_splits)
    seed = _validate.seed_value(seed)
    arr = np.asarray(strata)
    n = arr.shape[0] if arr.ndim else 0
    stratum, n_strata = _validate.keys(arr, n, "strata")
    codes, n_groups = _validate.keys(groups, n, "groups", reference="strata")
    if n_groups < n_splits:
        raise ValueError(
            f"cannot make {n_splits} grouped folds from {n_groups} groups: "
            "every fold needs at least one group of its own"
        )
    spread = max(np.unique(codes[stratum == s]).size for s in range(n_strata))
    if spread >= n_splits:
        splitter = StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
        with warnings.catch_warnings():
            # A small stratum cannot reach every fold: that is expected, not a fault.
            warnings.filterwarnings("ignore", message="The least populated class in y has only")
            tests = [test for _, test in splitter.split(np.zeros(n), stratum, codes)]
        if all(len(test) > 0 for test in tests):
            return _as_splits(tests, n)
    splitter_g = GroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    return _as_splits([test for _, test in splitter_g.split(np.zeros(n), stratum, codes)], n)


def inner_seed(seed: int, outer_fold: int) -> int:
    """Seed of the inner splits of one outer fold, derived from the run's seed.

    Parameters
    ----------
    seed : int
        The run's non-negative seed (the one that made the outer folds).
    outer_fold : int
        Index of the outer fold.

    Returns
    -------
    int
        ``np.random.SeedSequence([seed, outer_fold]).generate_state(1)[0]``, an integer in
        ``[0, 2**32)``: distinct outer folds get independent inner shuffles, and the same
        ``(seed, outer_fold)`` always gets the same one.

    """
    seed = _validate.seed_value(seed)
    outer_fold = _validate.seed_value(outer_fold)
    return int(np.random.SeedSequence([seed, outer_fold]).generate_state(1)[0])


def check_splits(
    splits: Sequence[tuple[ArrayLike, ArrayLike]], codes: NDArray[np.intp], name: str = "splits"
) -> list[Split]:
    """Validate caller-given splits as a grouped partition of the items.

    Parameters
    ----------
    splits : sequence of (array-like of int, array-like of int)
        ``(train_idx, test_idx)`` pairs, at least 2.
    codes : ndarray of int, shape (n,)
        Group code of every item.
    name : str
        Name used in error messages.

    Returns
    -------
    list of (ndarray of intp, ndarray of intp)
        The same splits as sorted index arrays.

    Raises
    ------
    ValueError
        If a split is malformed or out of range, train and test overlap, a group is on both
        sides, or the test folds do not cover every item exactly once.

    """
    n = codes.shape[0]
    if len(splits) < 2:
        raise ValueError(f"{name} must hold at least 2 (train_idx, test_idx) pairs")
    out: list[Split] = []
    seen = np.zeros(n, dtype=np.int64)
    for k, pair in enumerate(splits):
        if len(pair) != 2:
            raise ValueError(f"{name}[{k}] must be a (train_idx, test_idx) pair")
        parts = []
        for part_name, part in zip(("train", "test"), pair, strict=True):
            arr = np.asarray(part)
            if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
                raise ValueError(
                    f"{name}[{k}] {part_name} indices must be a non-empty 1-D int array"
                )
            if arr.min() < 0 or arr.max() >= n or np.unique(arr).size != arr.size:
                raise ValueError(f"{name}[{k}] {part_name} indices must be distinct, in [0, {n})")
            parts.append(np.sort(arr.astype(np.intp)))
        train_idx, test_idx = parts
        shared = np.intersect1d(codes[train_idx], codes[test_idx])
        if shared.size:
            raise ValueError(
                f"{name}[{k}] puts {shared.size} group(s) on both the training and the test side"
            )
        seen[test_idx] += 1
        out.append((train_idx, test_idx))
    if not (seen == 1).all():
        raise ValueError(f"{name}: every item must be in exactly one test fold")
    return out
