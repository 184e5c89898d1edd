"""JSON-ready summaries, paired differences and plot data."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import (
    average_precision_score,
    brier_score_loss,
    precision_recall_curve,
    roc_auc_score,
    roc_curve,
)

from app.stats.bootstrap import group_bootstrap
from app.stats.calibration import (
    pr_curve_points,
    reliability_bins,
    roc_curve_points,
    score_histograms,
)
from app.stats.metrics import choice_matched_auroc
from app.stats.summary import paired_difference, summarise

TOL = 1e-12


def data(n: int = 300, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, n // 4, n)
    y = rng.random(n) < 0.4
    p = np.clip(0.35 * y + 0.65 * rng.random(n), 0, 1)
    choice = np.where(rng.random(n) < 0.5, "A", "B")
    return y, p, groups, choice


def test_summarise_reports_every_metric_with_intervals() -> None:
    y, p, groups, choice = data()
    out = summarise(y, p, groups, choice=choice, resamples=200, seed=1)
    assert out["n"] == 300
    assert out["n_groups"] == np.unique(groups).size
    assert out["prevalence"] == pytest.approx(y.mean(), abs=0)
    assert out["auroc"] == pytest.approx(roc_auc_score(y, p), abs=TOL)
    assert out["auprc"] == pytest.approx(average_precision_score(y, p), abs=TOL)
    assert out["brier"] == pytest.approx(brier_score_loss(y, p), abs=TOL)
    assert out["choice_matched_auroc"] == pytest.approx(choice_matched_auroc(y, p, choice), abs=0)
    for name in ("prevalence", "auroc", "auprc", "brier", "choice_matched_auroc"):
        low, high = out[f"{name}_ci"]
        assert low <= out[name] <= high
        assert low < high
        assert out["valid_resamples"][name] == 200
    assert out["resamples"] == 200
    assert out["scores_are_probabilities"] is True
    json.dumps(out, allow_nan=False)


def test_summarise_uses_none_for_undefined_and_inapplicable_metrics() -> None:
    y = np.ones(12, dtype=int)
    p = np.linspace(-2.0, 3.0, 12)  # not probabilities: no Brier
    groups = np.arange(12) // 2
    out = summarise(y, p, groups, resamples=50)
    assert out["auroc"] is None and out["auroc_ci"] is None  # one class: never 0.5
    assert out["brier"] is None and out["brier_ci"] is None
    assert out["choice_matched_auroc"] is None and out["choice_matched_auroc_ci"] is None
    assert out["auprc"] == 1.0  # no negatives: every cut is perfectly precise
    assert out["scores_are_probabilities"] is False
    assert out["valid_resamples"]["auroc"] == 0
    text = json.dumps(out, allow_nan=False)
    assert '"auroc": null' in text


def test_summarise_is_reproducible_and_seed_sensitive() -> None:
    y, p, groups, _ = data()
    a = summarise(y, p, groups, resamples=150, seed=5)
    b = summarise(y, p, groups, resamples=150, seed=5)
    c = summarise(y, p, groups, resamples=150, seed=6)
    assert a == b
    assert a["auroc_ci"] != c["auroc_ci"]


def test_paired_difference_matches_group_bootstrap() -> None:
    y, p1, groups, _ = data()
    p2 = np.clip(p1 + np.random.default_rng(2).normal(0, 0.3, p1.size), 0, 1)
    out = paired_difference(y, p1, p2, groups, "auroc", resamples=300, seed=3)
    result = group_bootstrap(y, [p1, p2], groups, metrics=["auroc"], resamples=300, seed=3)
    deltas = result.replicates["auroc"][0] - result.replicates["auroc"][1]
    assert out["difference"] == pytest.approx(roc_auc_score(y, p1) - roc_auc_score(y, p2), abs=TOL)
    assert out["difference_ci"] == list(np.percentile(deltas, [2.5, 97.5]))
    assert out["p1_better_fraction"] == (deltas > 0).mean()
    assert out["p1_better_fraction"] > 0.95  # p2 is p1 plus noise
    assert out["higher_is_better"] is True
    json.dumps(out, allow_nan=False)


def test_paired_brier_difference_counts_lower_as_better() -> None:
    y, p1, groups, _ = data()
    p2 = np.full(p1.size, 0.5)
    out = paired_difference(y, p1, p2, groups, "brier", resamples=200)
    assert out["difference"] < 0
    assert out["p1_better_fraction"] == 1.0
    assert out["higher_is_better"] is False


def test_paired_difference_rejects_unknown_metrics() -> None:
    y, p, groups, _ = data(40)
    with pytest.raises(ValueError, match="metric must be one of"):
        paired_difference(y, p, p, groups, "prevalence")
    with pytest.raises(ValueError, match="p2 has 3 items"):
        paired_difference(y, p, [0.1, 0.2, 0.3], groups)


def test_roc_and_pr_points_equal_sklearn() -> None:
    y, p, _, _ = data()
    p = np.round(p, 1)
    roc = roc_curve_points(y, p)
    fpr, tpr, thresholds = roc_curve(y, p)
    assert roc is not None
    assert roc["fpr"] == fpr.tolist() and roc["tpr"] == tpr.tolist()
    assert roc["thresholds"][0] is None and roc["thresholds"][1:] == thresholds[1:].tolist()
    pr = pr_curve_points(y, p)
    precision, recall, cuts = precision_recall_curve(y, p)
    assert pr == {
        "precision": precision.tolist(),
        "recall": recall.tolist(),
        "thresholds": cuts.tolist(),
    }
    json.dumps([roc, pr], allow_nan=False)


def test_curves_are_none_when_undefined() -> None:
    assert roc_curve_points([1, 1], [0.2, 0.3]) is None
    assert roc_curve_points([0, 0], [0.2, 0.3]) is None
    assert pr_curve_points([0, 0], [0.2, 0.3]) is None
    assert pr_curve_points([1, 1], [0.2, 0.3]) is not None


def test_reliability_bins() -> None:
    y = np.array([0, 1, 1, 0, 1, 1])
    p = np.array([0.0, 0.3, 0.35, 0.95, 1.0, 0.5])
    bins = reliability_bins(y, p, n_bins=10)
    assert len(bins) == 10
    assert sum(b["count"] for b in bins) == 6
    assert bins[3] == {
        "lower": 0.3,
        "upper": 0.4,
        "count": 2,  # 0.3 sits on the edge and belongs to the bin it opens
        "mean_predicted": pytest.approx(0.325, abs=TOL),
        "observed": 1.0,
    }
    assert bins[9]["count"] == 2  # 0.95 and 1.0: the last bin is closed
    assert bins[9]["observed"] == 0.5
    assert bins[1]["count"] == 0 and bins[1]["mean_predicted"] is None
    assert bins[0]["mean_predicted"] == 0.0 and bins[0]["observed"] == 0.0
    json.dumps(bins, allow_nan=False)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        reliability_bins([0, 1], [0.5, 1.5])
    with pytest.raises(ValueError, match="n_bins"):
        reliability_bins([0, 1], [0.5, 0.5], n_bins=0)


def test_score_histograms_split_by_label() -> None:
    y, p, _, _ = data()
    hist = score_histograms(y, p, bins=10)
    assert len(hist["edges"]) == 11 and hist["edges"][0] == 0.0 and hist["edges"][-1] == 1.0
    assert sum(hist["positive"]) == y.sum()
    assert sum(hist["negative"]) == (~y).sum()
    expected, _ = np.histogram(p[y], bins=np.asarray(hist["edges"]))
    assert hist["positive"] == expected.tolist()
    raw = score_histograms([0, 1, 1], [-3.0, 2.0, 5.0], bins=4)
    assert raw["edges"][0] == -3.0 and raw["edges"][-1] == 5.0
    assert raw["negative"] == [1, 0, 0, 0] and raw["positive"] == [0, 0, 1, 1]
    json.dumps(raw, allow_nan=False)
    with pytest.raises(ValueError, match="value_range"):
        score_histograms([0, 1], [0.1, 0.2], value_range=(1.0, 0.0))


@pytest.mark.parametrize("value", [1e16, 3e17, 1e300, -1e300, float(np.finfo(np.float64).max)])
def test_score_histograms_of_equal_huge_scores_have_increasing_edges(value: float) -> None:
    """Equal scores from about 1e16 on made numpy's widened range collapse (metrics page 500)."""
    got = score_histograms([0, 1, 1], [value] * 3)
    assert np.all(np.diff(got["edges"]) > 0) and np.isfinite(got["edges"]).all()
    assert (sum(got["positive"]), sum(got["negative"])) == (2, 1)
