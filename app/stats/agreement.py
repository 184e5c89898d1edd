"""Inter-annotator agreement on nominal labels: Cohen's kappa, Krippendorff's alpha, intervals.

Labels are any hashable values (usually strings); ``None`` and NaN mean "not labelled". Kappa
drops an item unless both annotators labelled it; alpha drops a unit unless at least two coders
rated it. A statistic that is undefined on the data (no usable items, or no variation to agree
beyond chance) is returned as ``None``, never as 0 or 1.

Both statistics are functions of a few per-item totals, so each item is reduced once to a row of
counts and a bootstrap resample is a weighted sum of those rows. The resamples are the group
bootstrap's (``app.stats.bootstrap``): with the same seed and groups, resample ``b`` draws the
same groups here as there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

import numpy as np
from numpy.typing import ArrayLike, NDArray

from app.stats import _kernels, _validate, bootstrap

__all__ = [
    "AgreementEstimate",
    "agreement_with_reference",
    "bootstrap_alpha",
    "bootstrap_kappa",
    "bootstrap_kappa_pairs",
    "cohens_kappa",
    "krippendorff_alpha_nominal",
]

# Placeholder code of a missing label in the factorised arrays.
_MISSING = -1

_Statistic = Callable[[NDArray[np.float64]], NDArray[np.float64]]


class Resampling(TypedDict, total=False):
    """Keyword options of the bootstrapped statistics, each optional (see ``_bootstrap``)."""

    resamples: int
    seed: int
    level: float


@dataclass(frozen=True)
class AgreementEstimate:
    """An agreement statistic with its bootstrap percentile interval.

    Attributes
    ----------
    value : float or None
        The statistic on all usable items; ``None`` when undefined.
    ci : list of float or None
        ``[low, high]``; ``None`` when no resample gave a defined value (or none were drawn).
    n_items : int
        Usable items: pairs labelled by both annotators (kappa) or units with at least two
        ratings (alpha).
    valid_resamples : int
        Resamples in which the statistic was defined and which entered the interval.
    resamples : int
        Resamples drawn.
    reason : str or None
        Why ``ci`` is ``None`` although resamples were drawn: too few groups
        (:func:`app.stats.bootstrap.too_few_groups`).

    """

    value: float | None
    ci: list[float] | None
    n_items: int
    valid_resamples: int
    resamples: int
    reason: str | None = None


# ---------------------------------------------------------------------------------------------
# Factorising labels


def _is_missing(value: object) -> bool:
    if value is None:
        return True
    # np.float64 subclasses float but np.float32 does not; NaN is the only value != itself.
    return isinstance(value, float | np.floating) and bool(value != value)


class _Categories:
    """Codes 0..K-1 for labels, shared by every annotator of one computation."""

    def __init__(self, allowed: Sequence[Hashable] | None = None) -> None:
        self.index: dict[Hashable, int] = {}
        self.closed = allowed is not None
        if allowed is None:
            return
        if isinstance(allowed, str | bytes) or not isinstance(allowed, Sequence | np.ndarray):
            raise ValueError(f"labels must be a sequence of category labels, got {allowed!r}")
        for value in list(allowed):
            if _is_missing(value):
                raise ValueError("labels must not contain None or NaN")
            code = self._lookup(value, "labels")
            if code is not None:
                raise ValueError(f"labels contains {value!r} twice")
            self.index[value] = len(self.index)

    def __len__(self) -> int:
        return len(self.index)

    def _lookup(self, value: object, name: str) -> int | None:
        try:
            return self.index.get(value)  # type: ignore[call-overload]
        except TypeError:
            raise ValueError(
                f"{name} holds an unhashable value {value!r}; labels must be scalars"
            ) from None

    def encode(self, values: list[Any], name: str) -> NDArray[np.intp]:
        """Codes of ``values``, ``_MISSING`` where a value is None/NaN."""
        out = np.empty(len(values), dtype=np.intp)
        for i, value in enumerate(values):
            if _is_missing(value):
                out[i] = _MISSING
                continue
            code = self._lookup(value, name)
            if code is None:
                if self.closed:
                    known = list(self.index)[:10]
                    raise ValueError(f"{name} holds {value!r}, which is not among labels {known}")
                code = self.index[value] = len(self.index)
            out[i] = code
        return out


def _label_list(values: ArrayLike, name: str) -> list[Any]:
    try:
        arr = np.asarray(values, dtype=object)
    except ValueError as exc:  # ragged nested input
        raise ValueError(f"{name} must be one-dimensional with shape (n,): {exc}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional with shape (n,), got shape {arr.shape}")
    return arr.tolist()


# ---------------------------------------------------------------------------------------------
# Cohen's kappa


def _kappa_rows(
    a: ArrayLike, b: ArrayLike, labels: Sequence[Hashable] | None
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Per-item count rows of the items both annotators labelled, and which items those are.

    A row is ``[1, agree, onehot(a) (K), onehot(b) (K)]``: summed with any item weights it gives
    the total n, the confusion-matrix trace, and both annotators' label counts (the margins),
    which is all kappa needs.
    """
    first = _label_list(a, "a")
    second = _label_list(b, "b")
    if len(first) != len(second):
        raise ValueError(
            f"b has {len(second)} items but a has {len(first)}; both annotators must label "
            "the same items"
        )
    categories = _Categories(labels)
    code_a = categories.encode(first, "a")
    code_b = categories.encode(second, "b")
    return _kappa_rows_of_codes(code_a, code_b, len(categories))


def _kappa_rows_of_codes(
    code_a: NDArray[np.intp], code_b: NDArray[np.intp], k: int
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """:func:`_kappa_rows` of two annotators' codes (``_MISSING`` where unlabelled) over K codes.

    Codes no item uses add zero columns, which change neither margin product nor kappa: codes
    shared by many annotators give each pair the kappa of its own labels.
    """
    kept = (code_a != _MISSING) & (code_b != _MISSING)
    code_a, code_b = code_a[kept], code_b[kept]
    rows = np.zeros((code_a.size, 2 + 2 * k))
    rows[:, 0] = 1.0
    rows[:, 1] = code_a == code_b
    items = np.arange(code_a.size)
    rows[items, 2 + code_a] = 1.0
    rows[items, 2 + k + code_b] = 1.0
    return rows, kept


def _kappa_from(sums: NDArray[np.float64]) -> NDArray[np.float64]:
    """Kappa of each row of summed kappa rows (c, 2 + 2K) -> (c,), NaN where undefined."""
    k = (sums.shape[1] - 2) // 2
    n, trace = sums[:, 0], sums[:, 1]
    chance = np.einsum("ij,ij->i", sums[:, 2 : 2 + k], sums[:, 2 + k :])
    # kappa = (po - pe) / (1 - pe) with po = trace / n and pe = chance / n^2, multiplied through
    # by n^2: with integer weights every term is an integer, exact in float64, so pe == 1 is
    # detected exactly rather than as a tiny denominator.
    num = n * trace - chance
    den = n * n - chance
    out = np.full(n.shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def _defined(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def cohens_kappa(a: ArrayLike, b: ArrayLike, labels: Sequence[str] | None = None) -> float | None:
    """Cohen's kappa between two annotators' nominal labels on the same items.

    ``(po - pe) / (1 - pe)``, with ``po`` the share of items on which they agree and ``pe`` the
    agreement expected from their label frequencies alone. Equals
    ``sklearn.metrics.cohen_kappa_score`` on the items both labelled.

    Parameters
    ----------
    a, b : array-like, shape (n,)
        Labels of item i by each annotator (any hashable values). ``None`` or NaN marks an item
        that annotator did not label; such items are dropped pairwise.
    labels : sequence of str, optional
        The allowed categories. A label outside them raises ValueError (a typo in a label
        should not pass silently as a category of its own). Categories that nobody used do not
        change kappa.

    Returns
    -------
    float or None
        ``None`` when undefined: no item labelled by both, or ``pe == 1`` (both annotators
        used one and the same label throughout).

    Raises
    ------
    ValueError
        If ``a``/``b`` are not one-dimensional, differ in length, hold unhashable values, or
        hold a label outside ``labels``.

    """
    rows, _ = _kappa_rows(a, b, labels)
    return _defined(_kappa_from(rows.sum(axis=0, keepdims=True))[0])


def agreement_with_reference(labels: ArrayLike, reference: ArrayLike) -> dict[str, Any]:
    """How far one annotator agrees with the reference (original) labels of the same items.

    Parameters
    ----------
    labels : array-like, shape (n,)
        The annotator's labels; ``None``/NaN where not labelled.
    reference : array-like, shape (n,)
        The original labels; ``None``/NaN where absent.

    Returns
    -------
    dict
        ``n_items``: items with both labels; ``n_agree``: how many of those match;
        ``agreement``: ``n_agree / n_items`` (``None`` when ``n_items == 0``); ``kappa``:
        Cohen's kappa of the annotator against the reference (``None`` when undefined).

    Raises
    ------
    ValueError
        As ``cohens_kappa``.

    """
    rows, _ = _kappa_rows(labels, reference, None)
    sums = rows.sum(axis=0, keepdims=True)
    n_items, n_agree = int(sums[0, 0]), int(sums[0, 1])
    return {
        "n_items": n_items,
        "n_agree": n_agree,
        "agreement": n_agree / n_items if n_items else None,
        "kappa": _defined(_kappa_from(sums)[0]),
    }


# ---------------------------------------------------------------------------------------------
# Krippendorff's alpha (nominal)


def _rating_rows(ratings: Sequence[Sequence[str | None]]) -> list[list[Any]]:
    if isinstance(ratings, str | bytes):
        raise ValueError("ratings must be a sequence of items, each a sequence of ratings")
    if not isinstance(ratings, Sequence):
        # An array or data frame: rectangular (n_items, n_coders).
        try:
            arr = np.asarray(ratings, dtype=object)
        except ValueError as exc:
            raise ValueError(f"ratings must have shape (n_items, n_coders): {exc}") from None
        if arr.ndim != 2:
            raise ValueError(f"ratings must have shape (n_items, n_coders), got shape {arr.shape}")
        return arr.tolist()
    rows: list[list[Any]] = []
    for i, row in enumerate(ratings):
        # Rows may differ in length (each item lists whichever coders rated it), but a string
        # is not a row: iterating it would silently rate the item once per character.
        if isinstance(row, str | bytes) or not isinstance(row, Sequence | np.ndarray):
            raise ValueError(
                f"ratings[{i}] must be a sequence of one item's ratings (one per coder), "
                f"got {row!r}"
            )
        rows.append(_label_list(row, f"ratings[{i}]"))
    return rows


def _alpha_rows(
    ratings: Sequence[Sequence[str | None]],
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Per-unit count rows of the pairable units, and which units those are.

    A row is ``[m_u, agree_u, n_u1, ..., n_uK]``: the unit's number of ratings, its
    contribution ``sum_c n_uc (n_uc - 1) / (m_u - 1)`` to the diagonal of the coincidence
    matrix, and its count of each value. Summed over units these give n, the diagonal total
    ``sum_c o_cc`` and the value totals ``n_c``; for nominal data (disagreement 1 off the
    diagonal, 0 on it) that is the whole coincidence matrix as far as alpha is concerned.
    """
    rows = _rating_rows(ratings)
    categories = _Categories()
    sizes = np.fromiter((len(row) for row in rows), dtype=np.intp, count=len(rows))
    flat = [value for row in rows for value in row]
    codes = categories.encode(flat, "ratings")
    unit = np.repeat(np.arange(len(rows)), sizes)
    present = codes != _MISSING
    k = len(categories)
    counts = np.bincount(unit[present] * k + codes[present], minlength=len(rows) * k).reshape(
        len(rows), k
    )
    m = counts.sum(axis=1)
    pairable = m >= 2
    counts, m = counts[pairable], m[pairable]
    out = np.empty((m.size, 2 + k))
    out[:, 0] = m
    # Integer numerator, one division: a unit in full agreement contributes exactly m_u.
    out[:, 1] = (counts * (counts - 1)).sum(axis=1) / (m - 1)
    out[:, 2:] = counts
    return out, pairable


def _alpha_from(sums: NDArray[np.float64]) -> NDArray[np.float64]:
    """Alpha of each row of summed alpha rows (c, 2 + K) -> (c,), NaN where undefined."""
    n, diagonal, totals = sums[:, 0], sums[:, 1], sums[:, 2:]
    # alpha = 1 - D_o / D_e with D_o = (n - sum_c o_cc) / n and
    # D_e = (n^2 - sum_c n_c^2) / (n (n - 1)); the n's cancel to the expression below.
    expected = n * n - np.einsum("ij,ij->i", totals, totals)
    out = np.full(n.shape, np.nan)
    np.divide((n - 1.0) * (n - diagonal), expected, out=out, where=expected > 0)
    return 1.0 - out


def krippendorff_alpha_nominal(ratings: Sequence[Sequence[str | None]]) -> float | None:
    """Krippendorff's alpha for nominal data, any number of coders, missing ratings allowed.

    ``1 - D_o / D_e`` from the coincidence matrix of the pairable values (Krippendorff 2011,
    "Computing Krippendorff's Alpha-Reliability").

    Parameters
    ----------
    ratings : sequence of sequences, shape (n_items, n_coders)
        ``ratings[item][coder]``: the value that coder gave the item (any hashable), ``None``
        or NaN where not rated. Rows may differ in length; coder identity does not enter
        nominal alpha. A 2-D array (or data frame) of that shape is accepted too. Units with
        fewer than two ratings are not pairable and are dropped.

    Returns
    -------
    float or None
        ``None`` when undefined: no pairable unit, or a single value throughout (no
        expected disagreement).

    Raises
    ------
    ValueError
        If ``ratings`` is not a sequence of rows or holds unhashable values.

    """
    rows, _ = _alpha_rows(ratings)
    return _defined(_alpha_from(rows.sum(axis=0, keepdims=True))[0])


# ---------------------------------------------------------------------------------------------
# Bootstrap


def _weighted_totals(
    weights: NDArray[np.integer], unit_rows: NDArray[np.float64]
) -> NDArray[np.float64]:
    # One einsum per column: each replicate is then accumulated in
    # the same order whatever the chunking, so results do not depend on how B is split.
    w = weights.astype(np.float64, copy=False)
    out = np.empty((w.shape[0], unit_rows.shape[1]))
    for j in range(unit_rows.shape[1]):
        out[:, j] = np.einsum("ij,j->i", w, np.ascontiguousarray(unit_rows[:, j]))
    return out


def _bootstrap(
    rows: NDArray[np.float64],
    kept: NDArray[np.bool_],
    groups: ArrayLike | None,
    statistic: _Statistic,
    reference: str,
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> AgreementEstimate:
    """Point value and percentile interval of ``statistic`` over resamples of rows or groups."""
    resamples = _validate.resample_count(resamples)
    seed = _validate.seed_value(seed)
    level = _validate.confidence_level(level)
    if groups is None:
        units, n_units = None, rows.shape[0]
    elif kept.size == 0:
        # No items at all: nothing to resample, but the groups must still fit the items.
        if np.shape(groups) != (0,):
            raise ValueError(
                f"groups must have shape (0,) like {reference}, got {np.shape(groups)}"
            )
        units, n_units = None, 0
    else:
        codes, _ = _validate.keys(groups, kept.size, "groups", reference=reference)
        # Re-code over the usable items only: a group left with none of them is no part of
        # the data, just as a dropped item is not, and drawing it would only shrink resamples.
        _, units = np.unique(codes[kept], return_inverse=True)
        units = units.reshape(-1)
        n_units = int(units.max()) + 1 if units.size else 0
    value = _defined(statistic(rows.sum(axis=0, keepdims=True))[0])
    if n_units == 0 or resamples == 0:
        return AgreementEstimate(value, None, rows.shape[0], 0, resamples)
    unit_rows = rows if units is None else _kernels.unit_totals(rows, units, n_units)
    replicates = np.full(resamples, np.nan)

    def store(start: int, stop: int, weights: NDArray[np.int32]) -> None:
        replicates[start:stop] = statistic(_weighted_totals(weights, unit_rows))

    # The group bootstrap's own chunked resampler: same seeds, same draws, same memory bound.
    bootstrap._for_each_chunk(store, seed, resamples, n_units, n_units, threads=1, chunk_size=None)
    est = bootstrap.Estimate.of(
        value, bootstrap.percentile_interval(replicates, level), resamples, n_units
    )
    return AgreementEstimate(value, est.ci, rows.shape[0], est.valid, resamples, est.reason)


def bootstrap_kappa(
    a: ArrayLike,
    b: ArrayLike,
    groups: ArrayLike | None = None,
    **resampling: Unpack[Resampling],
) -> AgreementEstimate:
    """Cohen's kappa with a bootstrap percentile interval.

    Parameters
    ----------
    a, b : array-like, shape (n,)
        The two annotators' labels, as in ``cohens_kappa``; items not labelled by both are
        dropped before resampling.
    groups : array-like, shape (n,), optional
        Group key of each item (e.g. the question behind several items). When given, whole
        groups are resampled, as in ``app.stats.bootstrap.group_bootstrap``; otherwise items.
    resamples : int, default 2000
        Number of resamples B (0 gives the point value only); keyword only.
    seed : int, default 0
        Root seed; the same seed and data give the same interval; keyword only.
    level : float, default 0.95
        Interval coverage, strictly between 0 and 1; keyword only.

    Returns
    -------
    AgreementEstimate
        Resamples where kappa is undefined (``pe == 1``) are dropped from the interval and
        counted out of ``resamples`` by ``valid_resamples``.

    Raises
    ------
    ValueError
        On invalid labels (as ``cohens_kappa``), groups of the wrong length or with missing
        keys, or invalid ``resamples``/``seed``/``level``.

    """
    rows, kept = _kappa_rows(a, b, None)
    return _bootstrap(rows, kept, groups, _kappa_from, "a", **resampling)


def bootstrap_kappa_pairs(
    columns: Sequence[ArrayLike],
    pairs: Sequence[tuple[int, int]],
    groups: ArrayLike | None = None,
    **resampling: Unpack[Resampling],
) -> list[AgreementEstimate]:
    """:func:`bootstrap_kappa` of many pairs of annotators, each column's labels coded once.

    Equal to ``[bootstrap_kappa(columns[i], columns[j], groups, **resampling) for i, j in
    pairs]`` (a review queue with 20 annotators asks for 190 pairs plus 20 against the
    originals: coding every column again per pair was most of the time).

    Parameters
    ----------
    columns : sequence of array-like, each shape (n,)
        Each annotator's labels, None/NaN where the annotator did not label the item.
    pairs : sequence of (int, int)
        Indices into ``columns`` of the pairs to compare.
    groups : array-like, shape (n,), optional
        Group key of each item, as in :func:`bootstrap_kappa`.
    **resampling
        ``resamples``, ``seed`` and ``level``, as in :func:`bootstrap_kappa`.

    Returns
    -------
    list of AgreementEstimate
        One per pair, in the order of ``pairs``.

    Raises
    ------
    ValueError
        As :func:`bootstrap_kappa`, or a pair index outside ``columns``.

    """
    categories = _Categories()
    lists = [_label_list(col, f"columns[{i}]") for i, col in enumerate(columns)]
    if len({len(values) for values in lists}) > 1:
        raise ValueError("every column must label the same n items")
    codes = [categories.encode(values, f"columns[{i}]") for i, values in enumerate(lists)]
    out = []
    for i, j in pairs:
        if not (0 <= i < len(codes) and 0 <= j < len(codes)):
            raise ValueError(f"pair ({i}, {j}) is outside the {len(codes)} columns")
        rows, kept = _kappa_rows_of_codes(codes[i], codes[j], len(categories))
        out.append(_bootstrap(rows, kept, groups, _kappa_from, "a", **resampling))
    return out


def bootstrap_alpha(
    ratings: Sequence[Sequence[str | None]],
    groups: ArrayLike | None = None,
    **resampling: Unpack[Resampling],
) -> AgreementEstimate:
    """Krippendorff's nominal alpha with a bootstrap percentile interval.

    Parameters
    ----------
    ratings : sequence of sequences, shape (n_items, n_coders)
        As in ``krippendorff_alpha_nominal``; units with fewer than two ratings are dropped
        before resampling.
    groups : array-like, shape (n_items,), optional
        Group key of each item; when given, whole groups are resampled, otherwise units.
    resamples : int, default 2000
        Number of resamples B (0 gives the point value only); keyword only.
    seed : int, default 0
        Root seed; the same seed and data give the same interval; keyword only.
    level : float, default 0.95
        Interval coverage, strictly between 0 and 1; keyword only.

    Returns
    -------
    AgreementEstimate
        Resamples where alpha is undefined (a single value throughout) are dropped from the
        interval and counted out of ``resamples`` by ``valid_resamples``.

    Raises
    ------
    ValueError
        On invalid ratings, groups of the wrong length or with missing keys, or invalid
        ``resamples``/``seed``/``level``.

    """
    rows, kept = _alpha_rows(ratings)
    return _bootstrap(rows, kept, groups, _alpha_from, "ratings", **resampling)
