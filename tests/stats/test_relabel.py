"""Paired differences under two labelings: both sides resampled from one draw of the groups."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, roc_auc_score

from app.stats.bootstrap import group_multiplicities, percentile_interval
from app.stats.relabel import relabel_differences

TOL = 1e-12


def _labelings() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """60 items in 25 groups; review flips six labels, unlabels three and labels two."""
    rng = np.random.default_rng(3)
    n = 60
    groups = np.array([f"g{i % 25:02d}" for i in range(n)])
    truth = rng.random(n) < 0.5
    p = np.clip(0.5 + np.where(truth, 0.2, -0.2) + rng.normal(0, 0.25, n), 0, 1)
    original = truth.astype(float)
    resolved = original.copy()
    resolved[:6] = 1 - resolved[:6]
    resolved[6:9] = np.nan  # adjudicated to no label
    original[9:11] = np.nan  # newly labelled
    return original, resolved, p, groups


def test_replicates_are_each_side_on_the_same_groups() -> None:
    original, resolved, p, groups = _labelings()
    resamples, seed = 40, 7
    got = relabel_differences(
        original, resolved, p, groups, metrics=["auroc", "brier"], resamples=resamples, seed=seed
    )
    codes = np.unique(groups, return_inverse=True)[1]
    counts = group_multiplicities(codes.max() + 1, resamples, seed)[:, codes]
    for metric, score in (("auroc", roc_auc_score), ("brier", brier_score_loss)):
        sides = []
        for y in (original, resolved):
            keep = ~np.isnan(y)
            sides.append(
                np.array(
                    [
                        score(np.repeat(y[keep], c[keep]), np.repeat(p[keep], c[keep]))
                        for c in counts
                    ]
                )
            )
        low, high, valid = percentile_interval(sides[1] - sides[0])
        estimate = got[metric].estimate
        assert estimate.valid == valid == resamples
        assert abs(estimate.low - low) <= TOL and abs(estimate.high - high) <= TOL
        point = [score(y[~np.isnan(y)], p[~np.isnan(y)]) for y in (original, resolved)]
        assert abs(estimate.value - (point[1] - point[0])) <= TOL


def test_items_must_be_labelled_on_a_side() -> None:
    original, resolved, p, groups = _labelings()
    original[20] = resolved[20] = np.nan
    with pytest.raises(ValueError, match="label on one side"):
        relabel_differences(original, resolved, p, groups, resamples=5)
    with pytest.raises(ValueError, match="strata"):
        relabel_differences(
            original[:20], resolved[:20], p[:20], groups[:20], metrics=["choice_matched_auroc"]
        )
