"""Input checks shared by the public stats functions; kernels behind them trust their inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

_NUMERIC_KINDS = "biuf"


def _one_dimensional(values: ArrayLike, name: str) -> NDArray[Any]:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional with shape (n,), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty; metrics need at least one item")
    return arr


def _same_length(arr: NDArray[Any], n: int, name: str, reference: str) -> None:
    if arr.shape[0] != n:
        raise ValueError(
            f"{name} has {arr.shape[0]} items but {reference} has {n}; shapes must be equal"
        )


def labels(y: ArrayLike, name: str = "y") -> NDArray[np.bool_]:
    """Return binary labels as a boolean array of shape (n,), or raise ValueError."""
    arr = _one_dimensional(y, name)
    if arr.dtype == np.bool_:
        return arr
    if arr.dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(f"{name} must hold 0/1 labels, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    bad = ~((arr == 0) | (arr == 1))
    if bad.any():
        found = np.unique(arr[bad])[:5].tolist()
        raise ValueError(f"{name} must contain only 0 and 1; found {found}")
    return arr == 1


def scores(
    p: ArrayLike, n: int | None = None, name: str = "p", reference: str = "y"
) -> NDArray[np.float64]:
    """Return finite scores as float64 of shape (n,), or raise ValueError."""
    arr = _one_dimensional(p, name)
    if n is not None:
        _same_length(arr, n, name, reference)
    if arr.dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(f"{name} must be numeric scores, got dtype {arr.dtype}")
    out = arr.astype(np.float64, copy=False)
    if not np.isfinite(out).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return out


def probabilities(p: ArrayLike, n: int, name: str = "p") -> NDArray[np.float64]:
    """Return scores that must lie in [0, 1] as float64 of shape (n,), or raise ValueError."""
    out = scores(p, n, name)
    if not is_probability(out):
        raise ValueError(
            f"{name} must lie in [0, 1] for this metric; "
            f"found range [{out.min():.6g}, {out.max():.6g}]"
        )
    return out


def labelled_scores(y: ArrayLike, p: ArrayLike) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
    """Return binary labels ``y`` and their finite scores ``p``, both of shape (n,)."""
    labels_ = labels(y)
    return labels_, scores(p, labels_.size)


def is_probability(p: NDArray[np.float64]) -> bool:
    """Whether every value of a finite float array lies in [0, 1]."""
    return bool(p.size == 0 or (p.min() >= 0.0 and p.max() <= 1.0))


def keys(
    values: ArrayLike, n: int, name: str, reference: str = "y"
) -> tuple[NDArray[np.intp], int]:
    """Factorise hashable keys of shape (n,) into codes 0..k-1 and return ``(codes, k)``.

    Codes follow the sorted order of the distinct keys, not the order of the items, so the same
    set of groups always maps to the same codes and a seeded bootstrap does not depend on how the
    caller happened to order its rows.
    """
    arr = _one_dimensional(values, name)
    _same_length(arr, n, name, reference)
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN keys; every item needs a key")
    if arr.dtype.kind == "O":
        for value in arr:
            if value is None or (isinstance(value, float) and value != value):
                raise ValueError(f"{name} contains missing keys (None/NaN); every item needs one")
        try:
            uniques, codes = np.unique(arr, return_inverse=True)
        except TypeError:
            # Mixed key types cannot be sorted together: order by type name, then repr.
            distinct = sorted(set(arr.tolist()), key=lambda k: (type(k).__name__, repr(k)))
            index = {k: i for i, k in enumerate(distinct)}
            codes = np.fromiter((index[k] for k in arr.tolist()), dtype=np.intp, count=n)
            return codes, len(distinct)
        return codes.astype(np.intp, copy=False).reshape(n), int(uniques.size)
    uniques, codes = np.unique(arr, return_inverse=True)
    return codes.astype(np.intp, copy=False).reshape(n), int(uniques.size)


def resample_count(resamples: int) -> int:
    """Return a non-negative number of bootstrap resamples, or raise ValueError."""
    if isinstance(resamples, bool) or not isinstance(resamples, int | np.integer):
        raise ValueError(f"resamples must be an integer, got {resamples!r}")
    if resamples < 0:
        raise ValueError(f"resamples must be >= 0, got {resamples}")
    return int(resamples)


def seed_value(seed: int) -> int:
    """Return a non-negative integer seed, or raise ValueError."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def confidence_level(level: float) -> float:
    """Return an interval level strictly between 0 and 1, or raise ValueError."""
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1, got {level!r}")
    return float(level)
