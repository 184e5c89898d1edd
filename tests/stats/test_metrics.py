"""Point metrics against scikit-learn and brute force, undefined cases, and input validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score

from app.stats.metrics import (
    accuracy,
    auprc,
    auroc,
    brier,
    choice_matched_auroc,
    prevalence,
)

TOL = 1e-12


@st.composite
def labelled(draw: st.DrawFn, *, probabilities: bool = True, max_size: int = 60) -> tuple:
    """Labels and scores drawn from a handful of values, so that ties are frequent."""
    n = draw(st.integers(1, max_size))
    y = draw(arrays(np.int64, n, elements=st.integers(0, 1)))
    bound = 1.0 if probabilities else 1e6
    low = 0.0 if probabilities else -bound
    values = draw(
        st.lists(st.floats(low, bound, allow_nan=False), min_size=1, max_size=5, unique=True)
    )
    p = draw(arrays(np.float64, n, elements=st.sampled_from(values)))
    return y, p


def both_classes(y: np.ndarray) -> bool:
    return bool(y.any() and not y.all())


def brute_force_choice_matched(y: np.ndarray, p: np.ndarray, choice: np.ndarray) -> float | None:
    concordant = pairs = 0.0
    for i in range(y.size):
        for j in range(y.size):
            if y[i] == 1 and y[j] == 0 and choice[i] == choice[j]:
                pairs += 1
                concordant += 1.0 if p[i] > p[j] else 0.5 if p[i] == p[j] else 0.0
    return None if pairs == 0 else concordant / pairs


@settings(max_examples=300, deadline=None)
@given(labelled(probabilities=False))
def test_auroc_equals_sklearn_with_ties(data: tuple) -> None:
    y, p = data
    value = auroc(y, p)
    if both_classes(y):
        assert value is not None
        assert abs(value - roc_auc_score(y, p)) <= TOL
    else:
        assert value is None


@settings(max_examples=300, deadline=None)
@given(labelled(probabilities=False))
def test_auprc_equals_sklearn_average_precision_with_ties(data: tuple) -> None:
    y, p = data
    value = auprc(y, p)
    if y.any():
        assert value is not None
        assert abs(value - average_precision_score(y, p)) <= TOL
    else:
        assert value is None


@settings(max_examples=300, deadline=None)
@given(labelled(probabilities=True))
def test_brier_equals_sklearn(data: tuple) -> None:
    y, p = data
    assert abs(brier(y, p) - brier_score_loss(y, p)) <= TOL


@settings(max_examples=200, deadline=None)
@given(labelled(probabilities=True), st.floats(0, 1))
def test_accuracy_and_prevalence_match_definitions(data: tuple, threshold: float) -> None:
    y, p = data
    assert accuracy(y, p, threshold) == pytest.approx(np.mean((p >= threshold) == y), abs=0)
    assert prevalence(y) == pytest.approx(y.mean(), abs=0)


@settings(max_examples=300, deadline=None)
@given(labelled(probabilities=False, max_size=40), st.data())
def test_choice_matched_auroc_equals_brute_force_pair_count(
    data: tuple, extra: st.DataObject
) -> None:
    y, p = data
    choice = extra.draw(arrays(np.int64, y.size, elements=st.integers(0, 2)))
    value = choice_matched_auroc(y, p, choice)
    expected = brute_force_choice_matched(y, p, choice)
    if expected is None:
        assert value is None
    else:
        assert value is not None
        assert abs(value - expected) <= TOL


def test_choice_matched_auroc_accepts_string_strata() -> None:
    y = np.array([1, 0, 1, 0, 1, 0])
    p = np.array([0.9, 0.1, 0.2, 0.8, 0.5, 0.5])
    choice = np.array(["A", "A", "B", "B", "A", "B"])
    # Stratum A: positives {.9, .5} vs negative {.1}: 2 of 2. Stratum B: positive {.2} vs
    # negatives {.8, .5}: 0 of 2. Pooled: 2 / 4.
    assert choice_matched_auroc(y, p, choice) == 0.5
    assert choice_matched_auroc(y, p, choice.tolist()) == 0.5


def test_choice_matched_auroc_differs_from_plain_auroc() -> None:
    # The score separates strata, not labels within a stratum: plain AUROC rewards it,
    # choice-matched AUROC does not.
    y = np.array([1, 1, 0, 1, 0, 0])
    choice = np.array(["A", "A", "A", "B", "B", "B"])
    p = np.array([0.9, 0.9, 0.9, 0.1, 0.1, 0.1])
    assert auroc(y, p) == pytest.approx(roc_auc_score(y, p), abs=TOL)
    assert auroc(y, p) > 0.6
    assert choice_matched_auroc(y, p, choice) == 0.5


def test_known_values() -> None:
    y = [0, 0, 1, 1]
    p = [0.1, 0.4, 0.35, 0.8]
    assert auroc(y, p) == 0.75
    assert auprc(y, p) == pytest.approx(0.8333333333333333, abs=TOL)
    assert brier(y, p) == pytest.approx((0.01 + 0.16 + 0.4225 + 0.04) / 4, abs=TOL)
    assert accuracy(y, p) == 0.75  # predicts [0, 0, 0, 1]
    assert accuracy(y, p, threshold=0.35) == 0.75  # [0, 1, 1, 1]: p >= threshold is positive
    assert accuracy(y, p, threshold=0.05) == 0.5


@pytest.mark.parametrize("labels", [[0, 0, 0], [1, 1, 1], [True]])
def test_auroc_with_one_class_is_none_not_half(labels: list) -> None:
    p = np.linspace(0, 1, len(labels))
    assert auroc(labels, p) is None


def test_auprc_undefined_without_positives_and_one_without_negatives() -> None:
    assert auprc([0, 0, 0], [0.1, 0.2, 0.3]) is None
    assert auprc([1, 1], [0.1, 0.2]) == 1.0 == average_precision_score([1, 1], [0.1, 0.2])


def test_choice_matched_auroc_none_when_no_stratum_has_both_classes() -> None:
    # Both classes overall, but each stratum holds only one: no matched pair exists.
    y = [1, 1, 0, 0]
    choice = ["A", "A", "B", "B"]
    assert auroc(y, [0.9, 0.8, 0.1, 0.2]) == 1.0
    assert choice_matched_auroc(y, [0.9, 0.8, 0.1, 0.2], choice) is None


def test_accepts_bool_labels_and_integer_scores() -> None:
    assert auroc(np.array([False, True]), np.array([0, 1])) == 1.0
    assert brier(np.array([True, False]), np.array([1, 0])) == 0.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: auroc([[0, 1]], [[0.1, 0.2]]), "one-dimensional"),
        (lambda: auroc([], []), "empty"),
        (lambda: auroc([0, 2], [0.1, 0.2]), "only 0 and 1"),
        (lambda: auroc([0, np.nan], [0.1, 0.2]), "NaN"),
        (lambda: auroc(["a", "b"], [0.1, 0.2]), "0/1 labels"),
        (lambda: auroc([0, 1], [0.1, np.nan]), "NaN or infinite"),
        (lambda: auroc([0, 1], [0.1, np.inf]), "NaN or infinite"),
        (lambda: auroc([0, 1], ["x", "y"]), "numeric"),
        (lambda: auroc([0, 1, 1], [0.1, 0.2]), "shapes must be equal"),
        (lambda: auprc([0, 1], [0.1, 0.2, 0.3]), "shapes must be equal"),
        (lambda: brier([0, 1], [0.1, 1.2]), r"\[0, 1\]"),
        (lambda: brier([0, 1], [-0.1, 0.5]), r"\[0, 1\]"),
        (lambda: accuracy([0, 1], [0.1, 0.2], threshold=float("nan")), "threshold"),
        (lambda: choice_matched_auroc([0, 1], [0.1, 0.2], ["A"]), "shapes must be equal"),
        (lambda: choice_matched_auroc([0, 1], [0.1, 0.2], ["A", None]), "missing"),
        (lambda: choice_matched_auroc([0, 1], [0.1, 0.2], [1.0, np.nan]), "NaN"),
        (lambda: prevalence(np.zeros((2, 2))), "one-dimensional"),
    ],
)
def test_invalid_inputs_raise_clear_value_errors(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]
