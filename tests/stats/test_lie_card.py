"""A report card's row: TPR at the control threshold with its exact interval, AUROC's reason."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest
from sklearn.metrics import roc_auc_score

from app.stats import bootstrap
from app.stats.lie_card import slice_row


def _row(threshold: float | None = 0.6, groups: int = 40) -> tuple[dict, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    lie = np.repeat([True, False], 40)
    score = np.where(lie, rng.normal(0.7, 0.2, 80), rng.normal(0.4, 0.2, 80))
    row = slice_row(
        "likelihood", lie, score, [f"q{i % groups}" for i in range(80)], systems=["sys"] * 80,
        lengths=rng.integers(10, 90, 80), logliks=rng.normal(-20, 3, 80), threshold=threshold,
        resamples=50,
    )  # fmt: skip
    return row, lie, score


def test_tpr_at_the_threshold_is_a_direct_count_with_an_exact_interval() -> None:
    row, lie, score = _row()
    detected = int((score[lie] >= 0.6).sum())
    assert row["tpr"] == detected / 40
    assert row["fpr"] == float((score[~lie] >= 0.6).mean())
    exact = binomtest(detected, 40).proportion_ci(0.95, method="exact")
    assert row["tpr_ci"] == pytest.approx([exact.low, exact.high], abs=1e-9)
    assert row["auroc"] == pytest.approx(roc_auc_score(lie, score), abs=1e-12)
    assert "tpr" not in _row(threshold=None)[0]


def test_too_few_groups_withhold_the_auroc_interval_with_the_reason() -> None:
    bootstrap.set_min_interval_groups(10)
    row, _, _ = _row(groups=3)
    assert row["auroc"] is not None and row["auroc_ci"] is None
    assert row["auroc_ci_reason"].startswith("too few groups for an interval")
    assert _row(groups=40)[0]["auroc_ci_reason"] is None
