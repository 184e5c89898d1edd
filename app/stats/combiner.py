"""The learned label-error combiner: features of every ranker and the votes, fit, freeze, apply.

The combiner is an L2 logistic regression (:mod:`app.stats.probes`) over per-item features:

- every other ranker's score (``ranker:<name>``), whatever rankers are registered;
- the votes: plurality strength (share of the top option), plurality margin over the label,
  vote entropy (bits) and the share of answers naming no option;
- which models disagree with the label: one indicator per model (``disagrees:<model>``) and,
  free of model names, one per reliability rank (``disagrees:rank<r>``: the r-th most reliable
  model by agreement with the plurality vote, which reads no label and no verdict);
- label-free per-slice statistics: the slice's mean disagreement and vote entropy, its size
  (log) and the item's disagreement relative to its slice.

It learns from whatever verdicts exist (1 = the label is wrong). Items with a verdict get
out-of-fold scores from a nested grouped CV (no group on both sides of a split); a refit on all
of them (lambda chosen by grouped CV) scores every other item and is what a frozen combiner
keeps. A frozen combiner scores another benchmark by feature *name*: a feature the target lacks
(a model it has no answers from, a ranker that did not apply) enters at its training mean, which
standardises to 0 and contributes nothing; a feature the combiner never saw is ignored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from app.stats.label_errors import RankerFeatures, consensus_scores, vote_counts
from app.stats.probes import LinearProbe, nested_cv, select_then_refit

__all__ = [
    "RELIABILITY_RANKS",
    "Combiner",
    "CombinerFit",
    "combiner_features",
    "fingerprint",
    "fit_combiner",
    "reliability_order",
]

RELIABILITY_RANKS = 3
"""How many of the most reliable models get a model-name-free disagreement indicator."""
LAMBDAS: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 0.1, 1.0)
"""Grid of ``lam`` in ``mean log-loss + lam * ||w||^2`` (as the probes write it)."""
OUTER, INNER = 5, 3
"""Folds of the nested CV when there are groups enough (fewer groups: fewer folds)."""


def reliability_order(answers: ArrayLike, n_classes: int) -> NDArray[np.intp]:
    """Models from most to least reliable, by agreement with the plurality vote (no labels).

    Parameters
    ----------
    answers : array-like of int, shape (n, m)
        Coded answers (:mod:`app.stats.label_errors`).
    n_classes : int
        Number of options K.

    Returns
    -------
    ndarray of intp, shape (m,)
        Column indices; ties keep column order (a stable sort).

    """
    a = np.asarray(answers, dtype=np.int64)
    plurality = vote_counts(a, n_classes)[:, :n_classes].argmax(axis=1)
    answered = a != -1
    agree = ((a == plurality[:, None]) & answered).sum(axis=0)
    rate = agree / np.maximum(answered.sum(axis=0), 1)
    return np.argsort(-rate, kind="stable")


def _slice_means(values: NDArray[np.float64], codes: NDArray[np.intp]) -> NDArray[np.float64]:
    """Each item's slice mean of ``values`` (NaN ignored)."""
    ok = ~np.isnan(values)
    k = int(codes.max()) + 1
    sums = np.bincount(codes[ok], weights=values[ok], minlength=k)
    counts = np.bincount(codes[ok], minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    return means[codes]


def combiner_features(
    answers: ArrayLike,
    labels: ArrayLike,
    n_classes: int,
    *,
    models: Sequence[str],
    groups: ArrayLike,
    scores: Mapping[str, ArrayLike],
) -> RankerFeatures:
    """The combiner's features of n items (NaN where a feature is unknown for an item).

    Parameters
    ----------
    answers : array-like of int, shape (n, m)
        Coded answers of the m voting models.
    labels : array-like of int, shape (n,)
        Label option indices.
    n_classes : int
        Number of options K.
    models : sequence of str, length m
        The models' names (for the per-model indicators).
    groups : array-like, shape (n,)
        Slice (e.g. subject) of each item.
    scores : mapping of str to array-like of shape (n,)
        Other rankers' scores by ranker name.

    Returns
    -------
    RankerFeatures
        ``values`` of shape (n, f); the names are listed in the module docstring.

    """
    a = np.asarray(answers, dtype=np.int64)
    y = np.asarray(labels, dtype=np.int64)
    if a.ndim != 2 or a.shape[0] != y.shape[0] or a.shape[1] != len(models):
        raise ValueError(f"answers {a.shape} must be (n, m) for {len(models)} models, {y.shape}")
    n = y.shape[0]
    columns: dict[str, NDArray[np.float64]] = {}
    for name in sorted(scores):
        columns[f"ranker:{name}"] = np.asarray(scores[name], dtype=np.float64).reshape(n)
    counts = vote_counts(a, n_classes).astype(np.float64)
    answered = counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = counts / answered[:, None]
        entropy = -np.nansum(np.where(shares > 0, shares * np.log2(shares), 0.0), axis=1)
    entropy[answered == 0] = np.nan
    top = shares[:, :n_classes].max(axis=1)
    disagreement = consensus_scores(a, y, n_classes)
    columns["plurality_strength"] = top
    columns["plurality_margin"] = top - shares[np.arange(n), y]
    columns["vote_entropy"] = entropy
    columns["off_options"] = shares[:, n_classes]
    # 1 = the model answered something other than the label, 0 = it gave the label, NaN = no
    # answer (filled with the training mean: it says nothing either way).
    against = np.where(a == -1, np.nan, (a != y[:, None]).astype(np.float64))
    for j, model in enumerate(models):
        columns[f"disagrees:{model}"] = against[:, j]
    order = reliability_order(a, n_classes)
    for r in range(min(RELIABILITY_RANKS, len(models))):
        columns[f"disagrees:rank{r + 1}"] = against[:, order[r]]
    codes = np.unique(np.asarray(groups).astype(str), return_inverse=True)[1].reshape(n)
    slice_disagreement = _slice_means(disagreement, codes)
    columns["slice_disagreement"] = slice_disagreement
    columns["slice_entropy"] = _slice_means(entropy, codes)
    columns["slice_log_size"] = np.log(np.bincount(codes)[codes].astype(np.float64))
    columns["disagreement_vs_slice"] = disagreement - slice_disagreement
    return RankerFeatures(tuple(columns), np.column_stack(list(columns.values())))


@dataclass(frozen=True, eq=False)
class Combiner:
    """A fitted combiner: feature names, fill values (training means) and the probe.

    Scores are ``P(label wrong)`` of the logistic regression, applied by feature name.
    """

    names: tuple[str, ...]
    fill: NDArray[np.float64]
    probe: LinearProbe

    def matrix(self, features: RankerFeatures) -> NDArray[np.float64]:
        """``features`` in this combiner's column order, gaps filled: shape (n, len(names))."""
        where = {name: i for i, name in enumerate(features.names)}
        n = features.values.shape[0]
        out = np.tile(self.fill, (n, 1))
        for c, name in enumerate(self.names):
            if name in where:
                column = features.values[:, where[name]]
                out[:, c] = np.where(np.isnan(column), self.fill[c], column)
        return out

    def predict(self, features: RankerFeatures) -> NDArray[np.float64]:
        """``P(label wrong)`` per item, shape (n,)."""
        return self.probe.predict_proba(self.matrix(features))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (exact float round trip)."""
        return {
            "kind": "label_error_combiner",
            "names": list(self.names),
            "fill": self.fill.tolist(),
            "probe": self.probe.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Combiner:
        """Rebuild a combiner written by :meth:`to_dict`; ValueError if malformed."""
        if d.get("kind") != "label_error_combiner":
            raise ValueError(f"not a label-error combiner: kind={d.get('kind')!r}")
        names = tuple(str(n) for n in d["names"])
        fill = np.asarray(d["fill"], dtype=np.float64)
        probe = LinearProbe.from_dict(d["probe"])
        if fill.shape != (len(names),) or probe.n_features != len(names):
            raise ValueError("combiner names, fill values and coefficients differ in length")
        return cls(names, fill, probe)


@dataclass(frozen=True, eq=False)
class CombinerFit:
    """What fitting learnt: the frozen combiner, out-of-fold scores of the verdict items.

    ``oof`` has shape (n_verdicts,); ``folds`` says how they were made (``outer``, ``inner``,
    and ``groups``: ``"slices"``, or ``"items"`` when there were too few slices).
    """

    combiner: Combiner
    oof: NDArray[np.float64]
    folds: dict[str, Any]


def _folds(codes: NDArray[np.intp], y: NDArray[np.int64]) -> tuple[int, int] | None:
    """Outer and inner fold counts for these groups, or None when there are too few."""
    n_groups = int(codes.max()) + 1
    outer = min(OUTER, n_groups)
    inner = min(INNER, outer - 1)
    if outer < 3 or inner < 2:
        return None
    return outer, inner


def fit_combiner(
    features: RankerFeatures, y: ArrayLike, groups: ArrayLike, *, seed: int = 0
) -> CombinerFit:
    """Fit on the items that have a verdict: nested grouped CV for them, then a refit.

    Parameters
    ----------
    features : RankerFeatures
        Features of the verdict items, shape (n, f); NaN where unknown.
    y : array-like of {0, 1}, shape (n,)
        The verdicts (1 = the label is wrong); both classes needed.
    groups : array-like, shape (n,)
        Slice of each item; no slice straddles a split. With fewer than three slices the
        items themselves are the groups (recorded in ``folds``).
    seed : int
        Seed of the folds.

    Returns
    -------
    CombinerFit

    Raises
    ------
    ValueError
        One class only, or a training fold holding one class only.

    """
    target = np.asarray(y, dtype=np.int64)
    if len(set(target.tolist())) < 2:
        raise ValueError("the verdicts hold one class only; the combiner needs both")
    values = features.values
    with np.errstate(invalid="ignore"):
        fill = np.nanmean(np.where(np.isnan(values), np.nan, values), axis=0)
    # A feature no verdict item has (a ranker that scored none of them) cannot be learnt from.
    keep = ~np.isnan(fill)
    names = tuple(n for n, k in zip(features.names, keep, strict=True) if k)
    fill = fill[keep]
    x = np.where(np.isnan(values[:, keep]), fill, values[:, keep])
    codes = np.unique(np.asarray(groups).astype(str), return_inverse=True)[1].reshape(-1)
    kind = "slices"
    counts = _folds(codes, target)
    if counts is None:
        codes, kind = np.arange(len(target)), "items"
        counts = _folds(codes, target)
    assert counts is not None
    outer, inner = counts
    try:
        result = nested_cv(x, target, codes, lambdas=LAMBDAS, outer=outer, inner=inner, seed=seed)
    except ValueError:
        if kind == "items":
            raise
        # Defects confined to too few slices for grouped folds: fall back to items as groups.
        codes, kind = np.arange(len(target)), "items"
        outer, inner = OUTER, INNER
        result = nested_cv(x, target, codes, lambdas=LAMBDAS, outer=outer, inner=inner, seed=seed)
    probe, _grid = select_then_refit(x, target, codes, lambdas=LAMBDAS, folds=outer, seed=seed)
    return CombinerFit(
        Combiner(names, fill, probe),
        np.asarray(result.oof, dtype=np.float64),
        {"outer": outer, "inner": inner, "groups": kind, "lam": probe.lam},
    )


def fingerprint(
    benchmark: str,
    label: str,
    instance_ids: ArrayLike,
    verdicts: ArrayLike,
    names: Sequence[str],
) -> dict[str, Any]:
    """What a frozen combiner was trained on, recorded with it.

    Parameters
    ----------
    benchmark, label : str
        The training benchmark and the label set of its verdicts.
    instance_ids : array-like of int, shape (n,)
        The verdict items.
    verdicts : array-like of {0, 1}, shape (n,)
        Their verdicts.
    names : sequence of str
        The combiner's features, in order.

    Returns
    -------
    dict
        ``benchmark``, ``label``, ``items`` (how many), ``defects`` (verdicts of 1),
        ``items_sha256`` (of the ``(instance id, verdict)`` pairs sorted by id) and
        ``features``.

    """
    ids = np.asarray(instance_ids, dtype=np.int64)
    v = np.asarray(verdicts, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    pairs = np.column_stack([ids[order], v[order]]).tolist()
    digest = hashlib.sha256(json.dumps(pairs).encode()).hexdigest()
    return {
        "benchmark": benchmark,
        "label": label,
        "items": int(ids.size),
        "defects": int(v.sum()),
        "items_sha256": digest,
        "features": list(names),
    }
