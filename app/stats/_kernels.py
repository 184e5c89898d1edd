"""Weighted ranking and mean kernels, evaluated for many weight vectors (resamples) at once.

Inputs are trusted: the public functions in ``metrics`` and ``bootstrap`` validate them first.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray
from scipy import sparse

_INT32_LIMIT = np.iinfo(np.int32).max

# The arrays every plan is built from: labels, scores and each item's unit (or stratum) code.
Labels = NDArray[np.bool_]
Scores = NDArray[np.float64]
Codes = NDArray[np.intp]


class RankSums(NamedTuple):
    """Per-resample sums from which AUROC and average precision follow, each of shape (c,)."""

    pos: NDArray[np.floating]
    """Total weight of positives."""
    neg: NDArray[np.floating]
    """Total weight of negatives."""
    twice_concordant: NDArray[np.float64]
    """2 * (weighted concordant (pos, neg) pairs + 0.5 * weighted tied pairs)."""
    precision_sum: NDArray[np.float64] | None
    """Sum over positives of weight * precision at that positive's score threshold."""


class _Descending(NamedTuple):
    """A rank plan read from the highest score down (:meth:`RankPlan._descending`).

    Indices as uint32, the compiled kernel's (:mod:`app.stats._compiled`): half the memory
    an intp index reads per resample, and no wrap-around test for negative ones.
    """

    pos_units: NDArray[np.uint32]
    """Unit of each positive, highest score first."""
    neg_units: NDArray[np.uint32]
    """Unit of each negative, highest score first."""
    level_ends: NDArray[np.uint32] | None
    """Per level (highest first): positives at or above it; ``None`` when each is one positive."""
    ge: NDArray[np.uint32]
    """Per level: negatives scoring at or above it."""
    gt: NDArray[np.uint32] | None
    """Per level: negatives scoring strictly above it; ``None`` when no negative ties a level."""


class RankPlan:
    """The score order of one detector, computed once and reused by every resample.

    Items belong to *units* (bootstrap groups, or one unit per item); a resample is a vector of
    non-negative unit weights, and an item's weight is its unit's weight. Sorting happens here,
    once: ``evaluate`` only gathers, cumulates and sums, which is what makes thousands of
    resamples cheap.

    Parameters
    ----------
    y : ndarray of bool, shape (n,)
        Labels.
    p : ndarray of float64, shape (n,)
        Scores.
    units : ndarray of intp, shape (n,)
        Unit index of each item, in ``0 .. n_units - 1``.
    n_units : int
        Number of units (columns of the weight matrices passed to ``evaluate``).

    """

    def __init__(self, y: Labels, p: Scores, units: Codes, n_units: int) -> None:
        order = np.argsort(p, kind="stable")
        ys, ps, us = y[order], p[order], units[order]
        pos_scores, neg_scores = ps[ys], ps[~ys]
        self.n_units = n_units
        self.unit_sizes = np.bincount(units, minlength=n_units).astype(np.int64)
        # Positives and negatives each in ascending score order.
        self.pos_units = us[ys]
        self.neg_units = us[~ys]
        # Tied positives share everything but their weight: they are processed per distinct
        # positive score ("level"), their weights summed first. Without ties a level is a
        # positive and the summing is skipped.
        starts = np.flatnonzero(np.r_[True, pos_scores[1:] != pos_scores[:-1]]) if ys.any() else []
        self.level_starts: NDArray[np.intp] | None = (
            np.asarray(starts, dtype=np.intp) if len(starts) < pos_scores.size else None
        )
        level_scores = pos_scores[np.asarray(starts, dtype=np.intp)]
        # For each level: how many negatives score strictly below it, and at or below it.
        # Cumulated negative weights read at these offsets give "negatives below" and
        # "negatives tied", which is all the Mann-Whitney count with half-ties needs.
        self.neg_lt = np.searchsorted(neg_scores, level_scores, side="left")
        neg_le = np.searchsorted(neg_scores, level_scores, side="right")
        self._desc: _Descending | None = None
        self.neg_le: NDArray[np.intp] | None = (
            neg_le if bool((neg_le != self.neg_lt).any()) else None
        )

    def _accumulator(
        self, weights: NDArray[np.number], ws: Workspace | None = None
    ) -> type[np.number]:
        """Choose the dtype of cumulative weights: int32 when exact and safe, else wider."""
        if weights.dtype.kind not in "iub":
            return np.float64
        # A row's total item weight is at most (row sum) * (largest unit): a cheap bound that
        # is tight enough for bootstrap multiplicities, with the exact check as a fallback.
        rows = (ws if ws is not None else Workspace()).row_sums(weights)
        if int(rows.max(initial=0)) * int(self.unit_sizes.max(initial=0)) <= _INT32_LIMIT:
            return np.int32
        largest = int((weights.astype(np.int64, copy=False) @ self.unit_sizes).max(initial=0))
        return np.int32 if largest <= _INT32_LIMIT else np.int64

    def _gathered(
        self, weights: NDArray[np.number], acc: type[np.number], ws: Workspace
    ) -> tuple[NDArray, NDArray, NDArray | None, NDArray]:
        """Per-level inputs from item weights gathered in score order (any weights)."""
        w = weights.astype(acc, copy=False)
        c = w.shape[0]
        n_neg, n_pos = self.neg_units.size, self.pos_units.size
        n_levels = self.neg_lt.size
        # Exclusive cumulative negative weight in ascending score order: column k holds the
        # weight of the k lowest-scoring negatives. (take() with out= buffers its output under
        # the default mode="raise"; the plan's indices are in range, so "clip" changes nothing
        # but lets take write straight into the buffer.)
        w_neg = np.take(w, self.neg_units, axis=1, out=ws.get("wneg", (c, n_neg), acc), mode="clip")
        cneg = ws.get("cneg", (c, n_neg + 1), acc)
        cneg[:, 0] = 0
        np.cumsum(w_neg, axis=1, out=cneg[:, 1:])
        w_pos = np.take(w, self.pos_units, axis=1, out=ws.get("wpos", (c, n_pos), acc), mode="clip")
        if self.level_starts is None:
            w_level = w_pos
        else:
            w_level = np.add.reduceat(
                w_pos, self.level_starts, axis=1, out=ws.get("wlevel", (c, n_levels), acc)
            )
        neg_below = np.take(
            cneg, self.neg_lt, axis=1, out=ws.get("nb", (c, n_levels), acc), mode="clip"
        )
        tied = None
        if self.neg_le is not None:
            tied = np.take(
                cneg, self.neg_le, axis=1, out=ws.get("nle", (c, n_levels), acc), mode="clip"
            )
        return w_level, neg_below, tied, cneg[:, -1].copy()

    def _descending(self) -> _Descending:
        """The plan read from the top score down, for integer weights (built on first use)."""
        if self._desc is None:
            n_neg, n_pos = self.neg_units.size, self.pos_units.size
            ends = None
            if self.level_starts is not None:
                # Level l (ascending) holds positives [starts[l], starts[l + 1]); read from the
                # top, the positives at or above it are the first n_pos - starts[l].
                ends = (n_pos - self.level_starts[::-1]).astype(np.uint32)
            self._desc = _Descending(
                self.pos_units[::-1].astype(np.uint32),
                self.neg_units[::-1].astype(np.uint32),
                ends,
                # Negatives at or above / strictly above each level: a prefix of the negatives
                # read from the top, so an offset into their cumulated weights.
                (n_neg - self.neg_lt[::-1]).astype(np.uint32),
                None if self.neg_le is None else (n_neg - self.neg_le[::-1]).astype(np.uint32),
            )
        return self._desc

    def _counted(
        self,
        weights: NDArray[np.integer],
        acc: type[np.number],
        precision: bool,
        ws: Workspace,
    ) -> RankSums:
        """Ranking sums of integer unit weights, exactly, by the compiled kernel.

        Every quantity is an integer (in ``acc``) until the precision ratios, and the
        concordance count is exact in float64 (below 2**53), so the sums equal
        :meth:`_gathered`'s.
        """
        from app.stats._compiled import counted_rows  # numba: imported on first use

        plan = self._descending()
        c = weights.shape[0]
        if weights.dtype.kind == "b":
            weights = weights.view(np.uint8)
        pos = np.zeros(c, dtype=acc)
        neg = np.zeros(c, dtype=acc)
        twice = np.zeros(c)
        precision_sum = np.zeros(c) if precision else None
        counted_rows(
            weights,
            plan.neg_units,
            plan.pos_units,
            plan.level_ends,
            plan.ge,
            plan.gt,
            precision,
            # int32 totals bound every lost-pair sum below 2**63; wider ones are summed in
            # float64, as the float path does.
            acc is not np.int32,
            ws.get("cneg", (1, self.neg_units.size + 1), acc)[0],
            pos,
            neg,
            twice,
            np.empty(0) if precision_sum is None else precision_sum,
        )
        return RankSums(pos, neg, twice, precision_sum)

    def evaluate(
        self,
        weights: NDArray[np.number],
        *,
        precision: bool = True,
        workspace: Workspace | None = None,
    ) -> RankSums:
        """Ranking sums for each row of ``weights``.

        Parameters
        ----------
        weights : ndarray, shape (c, n_units)
            Non-negative unit weights, one resample per row. Integer weights (bootstrap
            multiplicities) are cumulated in integers, so the concordance count is exact.
        precision : bool
            Whether to compute the average-precision sum (skipped for choice-matched AUROC).
        workspace : Workspace, optional
            Scratch buffers reused across calls from one thread.

        Returns
        -------
        RankSums
            Arrays of shape (c,).

        """
        ws = workspace if workspace is not None else Workspace()
        acc = self._accumulator(weights, ws)
        if weights.dtype.kind in "iub":
            return self._counted(weights, acc, precision, ws)
        w_level, neg_below, below_or_tied, neg_total = self._gathered(weights, acc, ws)
        c = weights.shape[0]
        n_levels = self.neg_lt.size
        if below_or_tied is None:
            twice = 2.0 * np.einsum("ij,ij->i", w_level, neg_below, dtype=np.float64)
        else:
            below_or_tied += neg_below
            twice = np.einsum("ij,ij->i", w_level, below_or_tied, dtype=np.float64)

        # Exclusive cumulative positive weight over levels: the positives below each level.
        cpos = ws.get("cpos", (c, n_levels + 1), acc)
        cpos[:, 0] = 0
        np.cumsum(w_level, axis=1, out=cpos[:, 1:])
        pos_total = cpos[:, -1].copy()
        if not precision:
            return RankSums(pos_total, neg_total, twice, None)

        # At the threshold of each level's score: true positives are the positives at or
        # above it, false positives the negatives at or above it. Average precision sums
        # precision there, weighted by the positive weight the level adds to recall.
        true_pos = np.subtract(
            pos_total[:, None], cpos[:, :-1], out=ws.get("tp", (c, n_levels), acc)
        )
        called = np.subtract(neg_total[:, None], neg_below, out=neg_below)
        called += true_pos
        # `called` is 0 only where the level itself has weight 0 (so does its term); the
        # floor avoids 0/0 without changing any other quotient.
        floor = 1 if acc is not np.float64 else np.finfo(np.float64).tiny
        np.maximum(called, floor, out=called)
        ratio = np.divide(true_pos, called, out=ws.get("ratio", (c, n_levels), np.float64))
        precision_sum = np.einsum("ij,ij->i", w_level, ratio, dtype=np.float64)
        return RankSums(pos_total, neg_total, twice, precision_sum)


class Workspace:
    """Scratch arrays reused across kernel calls, so chunks do not pay for fresh memory.

    Freshly allocated large arrays are first-touched page by page, which costs more than the
    arithmetic done on them; one workspace per thread removes that cost. Not thread-safe.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, str], NDArray[np.generic]] = {}
        self._transposed: tuple[NDArray[np.number], NDArray[np.float64]] | None = None
        self._row_sums: tuple[NDArray[np.number], NDArray[np.int64]] | None = None

    def row_sums(self, weights: NDArray[np.number]) -> NDArray[np.int64]:
        """Each row's total of integer ``weights`` (c, n_units): shape (c,).

        Kept like :meth:`transposed`: every detector's plan checks the same resamples.
        """
        kept = self._row_sums
        if kept is not None and kept[0] is weights:
            return kept[1]
        out = weights.sum(axis=1, dtype=np.int64)
        self._row_sums = (weights, out)
        return out

    def transposed(self, weights: NDArray[np.number]) -> NDArray[np.float64]:
        """``weights`` (c, n_units) as a C-contiguous float64 (n_units, c) array.

        The unit-level products of every kernel read the same resamples this way; the last
        one is kept (with a reference to its source, so identity cannot be reused).
        """
        kept = self._transposed
        if kept is not None and kept[0] is weights:
            return kept[1]
        out = np.ascontiguousarray(weights.T, dtype=np.float64)
        self._transposed = (weights, out)
        return out

    def get(self, name: str, shape: tuple[int, int], dtype: type[np.generic]) -> NDArray:
        """A C-contiguous array of ``shape`` and ``dtype`` with arbitrary contents."""
        key = (name, np.dtype(dtype).str)
        size = shape[0] * shape[1]
        buffer = self._buffers.get(key)
        if buffer is None or buffer.size < size:
            buffer = np.empty(size, dtype=dtype)
            self._buffers[key] = buffer
        return buffer[:size].reshape(shape)


class StratifiedRankPlan:
    """Rank plans per stratum (e.g. the judge's AB choice), for choice-matched AUROC.

    Parameters
    ----------
    y : ndarray of bool, shape (n,)
    p : ndarray of float64, shape (n,)
    units : ndarray of intp, shape (n,)
    n_units : int
    strata : ndarray of intp, shape (n,)
        Stratum code of each item, in ``0 .. n_strata - 1``.
    n_strata : int

    """

    def __init__(
        self, y: Labels, p: Scores, units: Codes, n_units: int, strata: Codes, n_strata: int
    ) -> None:
        self.plans: list[RankPlan] = []
        for s in range(n_strata):
            mask = strata == s
            ys = y[mask]
            # A stratum with one class contributes no pairs in any resample.
            if ys.any() and not ys.all():
                self.plans.append(RankPlan(ys, p[mask], units[mask], n_units))

    def evaluate(
        self, weights: NDArray[np.number], workspace: Workspace | None = None
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Pooled ``(twice_concordant, pairs)`` over strata, each of shape (c,)."""
        c = weights.shape[0]
        twice = np.zeros(c)
        pairs = np.zeros(c)
        for plan in self.plans:
            sums = plan.evaluate(weights, precision=False, workspace=workspace)
            twice += sums.twice_concordant
            pairs += sums.pos.astype(np.float64) * sums.neg.astype(np.float64)
        return twice, pairs


def auroc_from(sums: RankSums) -> NDArray[np.float64]:
    """AUROC per resample, NaN where a class has zero weight; shape (c,)."""
    pairs = sums.pos.astype(np.float64) * sums.neg.astype(np.float64)
    return ratio(sums.twice_concordant, 2.0 * pairs)


def average_precision_from(sums: RankSums) -> NDArray[np.float64]:
    """Average precision per resample, NaN where positives have zero weight; shape (c,)."""
    assert sums.precision_sum is not None
    return ratio(sums.precision_sum, sums.pos.astype(np.float64))


def choice_matched_from(
    twice: NDArray[np.float64], pairs: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Choice-matched AUROC per resample, NaN where no stratum has both classes; shape (c,)."""
    return ratio(twice, 2.0 * pairs)


class TopPlan:
    """The top of one detector's ranking, for precision and recall at k (ties shared).

    The items are sorted by score, highest first, and cut into tie groups. At ``k`` the top
    holds every group whose cumulative weight stays below ``k`` and, of the group that crosses
    it, a share ``(k - weight above) / group weight`` of its positives: the expected true
    positives when ties are broken at random. Only a prefix of the ranking is gathered per
    resample (``prefix`` items, to the end of a tie group); rows whose prefix weighs less than
    ``k`` are recomputed over all items.

    Parameters
    ----------
    y : ndarray of bool, shape (n,)
        Labels.
    p : ndarray of float64, shape (n,)
        Scores.
    units : ndarray of intp, shape (n,)
        Unit index of each item.
    n_units : int
        Number of units.
    k_max : int
        The largest k that will be asked for.

    """

    def __init__(self, y: Labels, p: Scores, units: Codes, n_units: int, k_max: int) -> None:
        order = np.argsort(-p, kind="stable")
        scores = p[order]
        starts = np.flatnonzero(np.r_[True, scores[1:] != scores[:-1]])
        self.units = units[order]
        self.positive = y[order].astype(np.float64)
        self.starts = starts
        # Four times k_max items cover the top of nearly every resample (multiplicities
        # average 1); the prefix ends with a whole tie group.
        want = min(self.units.size, 4 * k_max)
        group = int(np.searchsorted(starts, want - 1, side="right")) - 1
        self.prefix = int(starts[group + 1]) if group + 1 < starts.size else self.units.size
        self.prefix_groups = group + 1
        self.positives_per_unit = np.bincount(
            units, weights=y.astype(np.float64), minlength=n_units
        )

    def _sums(self, weights: NDArray[np.number], end: int, groups: int) -> tuple[NDArray, NDArray]:
        w = weights[:, self.units[:end]].astype(np.float64)
        starts = self.starts[:groups]
        return np.add.reduceat(w, starts, axis=1), np.add.reduceat(
            w * self.positive[:end], starts, axis=1
        )

    def true_positives(self, weights: NDArray[np.number], k: int) -> NDArray[np.float64]:
        """Expected weighted positives among the top ``k`` for each row of ``weights`` (c, n_units).

        Returns
        -------
        ndarray of float64, shape (c,)
            NaN where the whole ranking weighs less than ``k``.

        """
        out = np.full(weights.shape[0], np.nan)
        group_w, group_pos = self._sums(weights, self.prefix, self.prefix_groups)
        rows = np.arange(weights.shape[0])
        short = np.cumsum(group_w, axis=1)[:, -1] < k
        if short.any() and self.prefix < self.units.size:
            full_w, full_pos = self._sums(weights[short], self.units.size, self.starts.size)
            out[short] = _top_positives(full_w, full_pos, k)
            rows = rows[~short]
            group_w, group_pos = group_w[~short], group_pos[~short]
        out[rows] = _top_positives(group_w, group_pos, k)
        return out

    def positives(self, weights: NDArray[np.number]) -> NDArray[np.float64]:
        """Total positive weight of each row of ``weights`` (c, n_units): shape (c,)."""
        return np.einsum("ij,j->i", weights.astype(np.float64), self.positives_per_unit)


def _top_positives(
    group_w: NDArray[np.float64], group_pos: NDArray[np.float64], k: int
) -> NDArray[np.float64]:
    """Positives in the top ``k`` from tie-group weights and positive weights, each (c, T)."""
    cum_w = np.cumsum(group_w, axis=1)
    cum_pos = np.cumsum(group_pos, axis=1)
    enough = cum_w[:, -1] >= k
    t = np.argmax(cum_w >= k, axis=1)
    rows = np.arange(group_w.shape[0])
    above_w = cum_w[rows, t] - group_w[rows, t]
    above_pos = cum_pos[rows, t] - group_pos[rows, t]
    crossing = np.divide(
        group_pos[rows, t], group_w[rows, t], out=np.zeros(rows.size), where=group_w[rows, t] > 0
    )
    return np.where(enough, above_pos + (k - above_w) * crossing, np.nan)


def ratio(num: NDArray[np.float64], den: NDArray[np.float64]) -> NDArray[np.float64]:
    """``num / den`` element-wise, NaN where ``den`` is not positive."""
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


class UnitMeans:
    """Weighted means of item values for many resamples, from per-unit totals.

    Parameters
    ----------
    unit_sums : ndarray of float64, shape (n_units, k)
        Sum of each of k item values within each unit.
    unit_sizes : ndarray of int64, shape (n_units,)
        Number of items in each unit.

    """

    def __init__(self, unit_sums: NDArray[np.float64], unit_sizes: NDArray[np.int64]) -> None:
        # Row 0 holds the unit sizes, rows 1.. the columns, each as a sparse row: item columns
        # such as a calibration bin's are zero in most units. The sparse product accumulates
        # each row over its units in index order whatever the number of resamples or of other
        # rows, so replicates are bit-identical however a bootstrap is split up or which
        # detectors it is run with (a BLAS product blocks its sums by the matrix shapes).
        rows = np.vstack([unit_sizes.astype(np.float64)[None, :], np.asarray(unit_sums).T])
        self._rows = sparse.csc_matrix(rows)
        self.k = rows.shape[0] - 1

    def __call__(
        self, weights: NDArray[np.number], workspace: Workspace | None = None
    ) -> NDArray[np.float64]:
        """Means for each row of ``weights`` (c, n_units): shape (c, k), NaN where no weight."""
        ws = workspace if workspace is not None else Workspace()
        sums = self._rows @ ws.transposed(weights)  # (k + 1, c)
        totals = sums[0][:, None]
        out = np.full((weights.shape[0], self.k), np.nan)
        np.divide(sums[1:].T, totals, out=out, where=totals > 0)
        return out


def unit_means(
    weights: NDArray[np.number], unit_sums: NDArray[np.float64], unit_sizes: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Weighted means of item values for each resample (one-off :class:`UnitMeans`).

    Parameters
    ----------
    weights : ndarray, shape (c, n_units)
        Non-negative unit weights, one resample per row.
    unit_sums : ndarray of float64, shape (n_units, k)
        Sum of each of k item values within each unit.
    unit_sizes : ndarray of int64, shape (n_units,)
        Number of items in each unit.

    Returns
    -------
    ndarray of float64, shape (c, k)
        NaN in a row whose total weight is zero.

    """
    return UnitMeans(unit_sums, unit_sizes)(weights)


def unit_totals(values: NDArray[np.float64], units: NDArray[np.intp], n_units: int) -> NDArray:
    """Per-unit sums of item values: ``values`` (n, k) -> (n_units, k)."""
    out = np.empty((n_units, values.shape[1]))
    for j in range(values.shape[1]):
        out[:, j] = np.bincount(units, weights=values[:, j], minlength=n_units)
    return out


def equal_width_bins(
    p: NDArray[np.float64], n_bins: int
) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
    """Bin of each probability among ``n_bins`` equal-width bins of [0, 1], the last closed.

    Returns ``(index (n,), edges (n_bins + 1,))``: bin k covers ``[edges[k], edges[k + 1])``
    and the last bin also holds ``p == 1``.
    """
    # k / n_bins is the float nearest to the true edge (linspace can be one ulp off: 0.3 would
    # become 0.30000000000000004). Binning compares against these same edges, so a value
    # exactly on an edge lands in the bin it bounds from below (p * n_bins can round across one).
    edges = np.arange(n_bins + 1) / n_bins
    return np.searchsorted(edges[1:-1], p, side="right"), edges


# Item-weighted entry points (one unit per item), used by the point metrics and the tests.


def weighted_rank_metrics(
    y: NDArray[np.bool_], p: NDArray[np.float64], weights: NDArray[np.number]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """AUROC and average precision for each row of item weights ``weights`` (B, n)."""
    n = y.shape[0]
    sums = RankPlan(y, p, np.arange(n, dtype=np.intp), n).evaluate(weights)
    return auroc_from(sums), average_precision_from(sums)


def weighted_brier(
    y: NDArray[np.bool_], p: NDArray[np.float64], weights: NDArray[np.number]
) -> NDArray[np.float64]:
    """Brier score for each row of item weights ``weights`` (B, n); shape (B,)."""
    err = (p - y) ** 2
    return unit_means(weights, err[:, None], np.ones(y.shape[0], dtype=np.int64))[:, 0]


def weighted_choice_matched_auroc(
    y: NDArray[np.bool_],
    p: NDArray[np.float64],
    strata: NDArray[np.intp],
    n_strata: int,
    weights: NDArray[np.number],
) -> NDArray[np.float64]:
    """Choice-matched AUROC for each row of item weights ``weights`` (B, n); shape (B,)."""
    n = y.shape[0]
    plan = StratifiedRankPlan(y, p, np.arange(n, dtype=np.intp), n, strata, n_strata)
    return choice_matched_from(*plan.evaluate(weights))
