"""One bootstrap pass for several detectors, and the integer rank kernel, change no number.

The metric matrix bootstraps every detector that scored the same items in one pass over one draw
(:func:`app.stats.bootstrap.group_bootstraps`, with one product for all their additive metrics);
integer resample weights take the rank kernel's integer path. Each must equal what it replaced:
a detector's own bootstrap, bit for bit, and the kernel's float path on the same weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.metrics.report import metric_rows
from app.stats import _kernels
from app.stats.bootstrap import group_bootstrap, group_bootstraps
from tests.metrics.test_service import build

METRIC_SETS = (
    ["prevalence", "auroc", "auprc", "brier", "ece", "accuracy"],
    ["prevalence", "auroc", "brier", "ece"],
    ["prevalence", "auroc", "auprc"],
)


@pytest.mark.parametrize("stratified", [False, True])
def test_one_pass_equals_each_detector_alone(stratified: bool) -> None:
    rng = np.random.default_rng(7)
    for trial in range(8):
        n = int(rng.integers(30, 2000))
        groups = rng.integers(0, max(2, n // 4), n)
        y = rng.random(n) < 0.4
        # Distinct scores, heavy ties, and scores outside [0, 1] (no Brier or ECE there).
        scores = [rng.random(n), np.round(rng.random(n), 1), rng.normal(size=n)]
        metrics = [list(m) for m in METRIC_SETS]
        choice = rng.integers(0, 2, n) if stratified else None
        if stratified:
            metrics = [[*m, "choice_matched_auroc"] for m in metrics]
        joint = group_bootstraps(
            y, scores, groups, metrics, choice=choice, resamples=50, seed=trial
        )
        for p, wanted, shared in zip(scores, metrics, joint, strict=True):
            alone = group_bootstrap(
                y, p, groups, metrics=wanted, choice=choice, resamples=50, seed=trial
            )
            for name in wanted:
                assert np.array_equal(alone.point[name], shared.point[name], equal_nan=True)
                assert np.array_equal(
                    alone.replicates[name], shared.replicates[name], equal_nan=True
                ), (trial, name)


def test_shared_pass_needs_one_metric_list_per_detector() -> None:
    with pytest.raises(ValueError, match="2 score arrays but 1 metric lists"):
        group_bootstraps([0, 1, 1], [[0.1, 0.2, 0.3]] * 2, [0, 1, 2], [["auroc"]])


@pytest.mark.parametrize("decimals", [None, 1, 2])
def test_integer_rank_kernel_equals_the_float_path(decimals: int | None) -> None:
    rng = np.random.default_rng(11)
    for _ in range(30):
        n = int(rng.integers(1, 500))
        n_units = int(rng.integers(1, n + 1))
        units = rng.integers(0, n_units, n).astype(np.intp)
        y = rng.random(n) < rng.random()
        p = rng.random(n) if decimals is None else np.round(rng.random(n), decimals)
        weights = rng.integers(0, 4, (int(rng.integers(1, 12)), n_units)).astype(np.uint8)
        plan = _kernels.RankPlan(y, p, units, n_units)
        exact = plan.evaluate(weights)
        floats = plan.evaluate(weights.astype(np.float64))
        # Counts and the concordance are integers either way: equal exactly.
        assert np.array_equal(exact.pos, floats.pos)
        assert np.array_equal(exact.neg, floats.neg)
        assert np.array_equal(exact.twice_concordant, floats.twice_concordant)
        assert exact.precision_sum is not None and floats.precision_sum is not None
        np.testing.assert_allclose(exact.precision_sum, floats.precision_sum, rtol=1e-13)


def _items() -> list[dict[str, Any]]:
    rng = np.random.default_rng(3)
    items = []
    for k in range(240):
        label = "A" if rng.random() < 0.5 else "B"
        sign = 1.0 if label == "A" else -1.0
        scores = {
            f"det-{d}": float(1 / (1 + np.exp(-(strength * sign + rng.normal(0, 1.5)))))
            for d, strength in enumerate((2.0, 1.0, 0.0))
        }
        items.append({"id": f"i{k}", "group": f"g{k // 4}", "labels": {"reference": label}})
        items[-1]["scores"] = scores
    # One detector misses some items: it is bootstrapped apart from the others.
    for item in items[:30]:
        del item["scores"]["det-2"]
    return items


def test_matrix_rows_equal_with_and_without_the_shared_pass(
    factory: sessionmaker[Session],
) -> None:
    with transaction(factory) as session:
        build(session, _items())
    with factory() as session:
        _, together = metric_rows(session, "bench", resamples=120, cache=None)
        alone = [
            metric_rows(session, "bench", detectors=[name], resamples=120, cache=None)[1]
            for name in ("det-0", "det-1", "det-2")
        ]
    assert [row.detector for row in together] == ["det-0", "det-1", "det-2"]
    assert [row.as_dict() for row in together] == [rows[0].as_dict() for rows in alone]
    assert together[2].n == 210 and together[0].n == 240
