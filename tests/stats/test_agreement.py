"""Agreement statistics: kappa, alpha and their bootstrap intervals.

Kappa is checked against scikit-learn, alpha against Krippendorff (2011) and an explicit pairwise
reference, and the bootstrap for seeds, whole groups and undefined resamples.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from app.stats.agreement import (
    AgreementEstimate,
    agreement_with_reference,
    bootstrap_alpha,
    bootstrap_kappa,
    bootstrap_kappa_pairs,
    cohens_kappa,
    krippendorff_alpha_nominal,
)
from app.stats.bootstrap import group_multiplicities, percentile_interval

TOL = 1e-12
N = None

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", example C: nominal data,
# four observers, twelve units, missing values. Rows are observers, columns units 1..12.
K2011_OBSERVERS = {
    "A": [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
    "B": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
    "C": [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
    "D": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N],
}


def by_unit(observers: dict[str, list]) -> list[list]:
    """Transpose observer rows into ratings[unit][coder]."""
    return [list(unit) for unit in zip(*observers.values(), strict=True)]


def is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def reference_alpha(ratings: list[list]) -> float | None:
    """Nominal alpha = 1 - D_o / D_e straight from the pairwise definition, by explicit loops.

    D_o averages, over the ordered pairs of values within a unit (each weighted 1 / (m_u - 1)),
    whether they differ; D_e averages the same over all ordered pairs of pairable values.
    """
    units = [[v for v in row if not is_missing(v)] for row in ratings]
    units = [u for u in units if len(u) >= 2]
    values = [v for u in units for v in u]
    n = len(values)
    if n == 0:
        return None
    observed = 0.0
    for u in units:
        for i in range(len(u)):
            for j in range(len(u)):
                if i != j and u[i] != u[j]:
                    observed += 1.0 / (len(u) - 1)
    observed /= n
    expected = 0.0
    for i in range(n):
        for j in range(n):
            if i != j and values[i] != values[j]:
                expected += 1.0
    expected /= n * (n - 1)
    if expected == 0:
        return None
    return 1.0 - observed / expected


def random_pairs(
    rng: np.random.Generator, labels: list, n: int, missing: float
) -> tuple[np.ndarray, np.ndarray]:
    weights = rng.dirichlet(np.ones(len(labels)))
    a = rng.choice(np.array(labels, dtype=object), size=n, p=weights)
    # b copies a often enough that kappa is well away from 0.
    noise = rng.choice(np.array(labels, dtype=object), size=n, p=weights)
    b = np.where(rng.random(n) < 0.6, a, noise)
    a[rng.random(n) < missing] = None
    b[rng.random(n) < missing] = None
    return a, b


def random_ratings(
    rng: np.random.Generator, n_units: int, n_coders: int, n_values: int, missing: float
) -> list[list]:
    truth = rng.integers(0, n_values, n_units)
    noise = rng.integers(0, n_values, (n_units, n_coders))
    values = np.where(rng.random((n_units, n_coders)) < 0.5, truth[:, None], noise)
    ratings = [[f"v{v}" for v in row] for row in values]
    for row in ratings:
        for j in range(n_coders):
            if rng.random() < missing:
                row[j] = None
    return ratings


# ---------------------------------------------------------------------------------------------
# Cohen's kappa


def test_kappa_worked_example() -> None:
    # 50 items: yes/yes 20, yes/no 5, no/yes 10, no/no 15. po = 35/50 = 0.7; A says yes half
    # the time and B 60%, so pe = 0.5 * 0.6 + 0.5 * 0.4 = 0.5 and kappa = 0.2 / 0.5 = 0.4.
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert cohens_kappa(a, b) == pytest.approx(0.4, abs=TOL)
    assert cohens_kappa(b, a) == pytest.approx(0.4, abs=TOL)
    assert cohens_kappa(a, a) == 1.0


@pytest.mark.parametrize(
    ("labels", "missing"),
    [
        (["yes", "no"], 0.0),
        (["yes", "no"], 0.2),
        (["A", "B", "C", "tie"], 0.1),
        (["safe", "unsafe", "unsure", "refused", "other", "n/a"], 0.3),
    ],
)
def test_kappa_equals_sklearn_on_pairwise_complete_items(labels: list, missing: float) -> None:
    rng = np.random.default_rng(len(labels) * 100 + int(missing * 10))
    undefined = 0
    for _ in range(10):
        a, b = random_pairs(rng, labels, int(rng.integers(20, 300)), missing)
        both = np.array([x is not None and y is not None for x, y in zip(a, b, strict=True)])
        with warnings.catch_warnings():
            # sklearn warns (and gives NaN) where kappa is undefined; we give None there.
            warnings.simplefilter("ignore")
            expected = cohen_kappa_score(list(a[both]), list(b[both]))
        if math.isnan(expected):
            undefined += 1
            assert cohens_kappa(a, b) is None
            continue
        assert cohens_kappa(a, b) == pytest.approx(expected, abs=TOL)
        # Declaring the categories, including one nobody used, changes nothing.
        declared = cohens_kappa(a, b, labels=[*labels, "never used"])
        assert declared == pytest.approx(expected, abs=TOL)
    assert undefined <= 2  # the comparison above ran on most draws


def test_kappa_takes_numeric_labels_with_nan_as_missing() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 3, 200).astype(float)
    b = np.where(rng.random(200) < 0.7, a, rng.integers(0, 3, 200)).astype(float)
    a[:15] = np.nan
    b[10:30] = np.nan
    both = ~np.isnan(a) & ~np.isnan(b)
    assert cohens_kappa(a, b) == pytest.approx(cohen_kappa_score(a[both], b[both]), abs=TOL)


def test_kappa_is_none_when_undefined() -> None:
    assert cohens_kappa([], []) is None
    assert cohens_kappa(["a", None], [None, "b"]) is None  # no item labelled by both
    # Both annotators say "a" throughout: pe == 1, so kappa is 0/0, not 1.
    assert cohens_kappa(["a", "a", "a"], ["a", "a", "a"]) is None
    # Only one constant annotator is fine: pe < 1.
    assert cohens_kappa(["a", "a", "a", "a"], ["a", "b", "a", "b"]) == pytest.approx(0.0)


def test_kappa_validates_inputs() -> None:
    with pytest.raises(ValueError, match="same items"):
        cohens_kappa(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="one-dimensional"):
        cohens_kappa([["a", "b"]], [["a", "b"]])
    with pytest.raises(ValueError, match="not among labels"):
        cohens_kappa(["yes", "no", "yse"], ["yes", "no", "no"], labels=["yes", "no"])
    with pytest.raises(ValueError, match="twice"):
        cohens_kappa(["yes"], ["no"], labels=["yes", "no", "yes"])
    with pytest.raises(ValueError, match="unhashable"):
        cohens_kappa(np.array([{"a": 1}, "b"], dtype=object), ["a", "b"])


def test_agreement_with_reference() -> None:
    labels = ["yes", "yes", "no", None, "no", "yes", "no", "no"]
    reference = ["yes", "no", "no", "yes", "no", "yes", "yes", None]
    out = agreement_with_reference(labels, reference)
    # Items 3 and 7 lack a label; of the six left, four agree.
    assert out["n_items"] == 6
    assert out["n_agree"] == 4
    assert out["agreement"] == pytest.approx(4 / 6, abs=TOL)
    kept = [3 != i != 7 for i in range(8)]
    expected = cohen_kappa_score(
        [x for x, k in zip(labels, kept, strict=True) if k],
        [x for x, k in zip(reference, kept, strict=True) if k],
    )
    assert out["kappa"] == pytest.approx(expected, abs=TOL)
    empty = agreement_with_reference([None], ["yes"])
    assert empty == {"n_items": 0, "n_agree": 0, "agreement": None, "kappa": None}


# ---------------------------------------------------------------------------------------------
# Krippendorff's alpha


def test_alpha_krippendorff_2011_nominal_example_with_missing_values() -> None:
    ratings = by_unit(K2011_OBSERVERS)
    alpha = krippendorff_alpha_nominal(ratings)
    assert alpha is not None
    assert round(alpha, 3) == 0.743
    # By hand: 40 pairable values (unit 12 has one); the coincidence diagonal totals 32 and the
    # values 1..5 occur 9, 13, 10, 5, 3 times, so alpha = 1 - 39 * 8 / (40^2 - 384) = 1 - 312/1216.
    assert alpha == pytest.approx(1 - 312 / 1216, abs=TOL)
    assert alpha == pytest.approx(reference_alpha(ratings), abs=TOL)


def test_alpha_krippendorff_2011_two_observer_examples() -> None:
    # Example A: binary data, two observers, no missing data: alpha = 0.095.
    binary = {"A": [0, 1, 0, 0, 0, 0, 0, 0, 1, 0], "B": [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]}
    alpha = krippendorff_alpha_nominal(by_unit(binary))
    assert alpha is not None
    assert round(alpha, 3) == 0.095
    assert alpha == pytest.approx(1 - 19 * 4 / (14 * 6), abs=TOL)
    # Example B: nominal data, two observers, no missing data: alpha = 0.692.
    nominal = {"A": list("aabbdcccedda"), "B": list("babbbccceddd")}
    alpha = krippendorff_alpha_nominal(by_unit(nominal))
    assert alpha is not None
    assert round(alpha, 3) == 0.692
    assert alpha == pytest.approx(1 - 23 * 6 / (24**2 - 128), abs=TOL)


@pytest.mark.parametrize(
    ("n_units", "n_coders", "n_values", "missing"),
    [(30, 2, 2, 0.0), (40, 3, 4, 0.2), (25, 5, 3, 0.4), (60, 4, 7, 0.5)],
)
def test_alpha_equals_pairwise_reference_on_random_data(
    n_units: int, n_coders: int, n_values: int, missing: float
) -> None:
    rng = np.random.default_rng(n_units * n_coders + n_values)
    for _ in range(5):
        ratings = random_ratings(rng, n_units, n_coders, n_values, missing)
        expected = reference_alpha(ratings)
        assert expected is not None
        assert krippendorff_alpha_nominal(ratings) == pytest.approx(expected, abs=TOL)


def test_alpha_perfect_agreement_is_one() -> None:
    ratings = [["a", "a", "a"], ["b", "b", None], ["c", "c", "c"], ["a", None, "a"]]
    assert krippendorff_alpha_nominal(ratings) == 1.0


def test_alpha_drops_units_with_a_single_rating() -> None:
    ratings = random_ratings(np.random.default_rng(8), 30, 3, 3, 0.1)
    base = krippendorff_alpha_nominal(ratings)
    # Lone ratings, even of values seen nowhere else, pair with nothing and change nothing.
    padded = [*ratings, ["v0", None, None], [None, "new", None], ["other"]]
    assert krippendorff_alpha_nominal(padded) == base
    pairable = sum(sum(v is not None for v in row) >= 2 for row in ratings)
    assert pairable < len(ratings)
    assert bootstrap_alpha(padded, resamples=0).n_items == pairable


def test_alpha_is_none_when_undefined() -> None:
    assert krippendorff_alpha_nominal([]) is None
    assert krippendorff_alpha_nominal([[None, None], [None, None]]) is None
    assert krippendorff_alpha_nominal([["a", None], [None, "b"]]) is None  # nothing pairable
    assert krippendorff_alpha_nominal([["a", "a"], ["a", "a", "a"]]) is None  # one value only


def test_alpha_accepts_arrays_and_ragged_rows() -> None:
    ratings = by_unit(K2011_OBSERVERS)
    as_float = np.array(
        [[np.nan if v is None else float(v) for v in row] for row in ratings], dtype=float
    )
    assert krippendorff_alpha_nominal(as_float) == pytest.approx(1 - 312 / 1216, abs=TOL)
    ragged = [[v for v in row if v is not None] for row in ratings]
    assert krippendorff_alpha_nominal(ragged) == pytest.approx(1 - 312 / 1216, abs=TOL)


def test_alpha_validates_inputs() -> None:
    with pytest.raises(ValueError, match=r"ratings\[1\]"):
        krippendorff_alpha_nominal([["a", "b"], "ab"])
    with pytest.raises(ValueError, match="n_items, n_coders"):
        krippendorff_alpha_nominal(np.array(["a", "b"]))
    with pytest.raises(ValueError, match="unhashable"):
        krippendorff_alpha_nominal([["a", ["b"]]])


# ---------------------------------------------------------------------------------------------
# Bootstrap


def test_kappa_bootstrap_equals_the_statistic_on_materialised_group_resamples() -> None:
    rng = np.random.default_rng(21)
    a, b = random_pairs(rng, ["x", "y", "z"], 150, 0.15)
    groups = np.array([f"g{k:02d}" for k in rng.integers(0, 40, 150)])
    groups[:4] = "only-missing"  # a group whose items all go: it must not be drawn
    a[:4] = None
    estimate = bootstrap_kappa(a, b, groups, resamples=300, seed=5, level=0.9)

    kept = np.array([x is not None and y is not None for x, y in zip(a, b, strict=True)])
    a, b, groups = a[kept], b[kept], groups[kept]
    units = np.unique(groups, return_inverse=True)[1]
    per_item = group_multiplicities(units.max() + 1, 300, seed=5)[:, units]
    replicates = []
    for row in per_item:
        index = np.repeat(np.arange(a.size), row)
        replicates.append(cohen_kappa_score(list(a[index]), list(b[index])))
    low, high, valid = percentile_interval(replicates, 0.9)

    assert estimate.n_items == a.size
    assert estimate.value == pytest.approx(cohen_kappa_score(list(a), list(b)), abs=TOL)
    assert estimate.valid_resamples == valid == 300
    assert estimate.ci is not None
    assert estimate.ci == pytest.approx([low, high], abs=TOL)


def test_alpha_bootstrap_equals_the_statistic_on_materialised_resamples() -> None:
    rng = np.random.default_rng(4)
    ratings = random_ratings(rng, 60, 3, 3, 0.3)
    pairable = [sum(v is not None for v in row) >= 2 for row in ratings]
    usable = [row for row, p in zip(ratings, pairable, strict=True) if p]
    estimate = bootstrap_alpha(ratings, resamples=200, seed=9)
    # Without groups each pairable unit is its own group, coded in order.
    counts = group_multiplicities(len(usable), 200, seed=9)
    replicates = [
        reference_alpha([row for row, k in zip(usable, m, strict=True) for _ in range(k)])
        for m in counts
    ]
    low, high, valid = percentile_interval(replicates)
    assert estimate.n_items == len(usable) < len(ratings)
    assert estimate.value == pytest.approx(reference_alpha(ratings), abs=TOL)
    assert estimate.valid_resamples == valid == 200
    assert estimate.ci == pytest.approx([low, high], abs=TOL)


def test_same_seed_same_interval_other_seed_other_interval() -> None:
    rng = np.random.default_rng(0)
    a, b = random_pairs(rng, ["yes", "no", "maybe"], 300, 0.1)
    ratings = random_ratings(rng, 200, 4, 3, 0.2)
    groups = np.arange(200) // 4
    for run in (
        lambda seed: bootstrap_kappa(a, b, resamples=500, seed=seed),
        lambda seed: bootstrap_kappa(a, b, np.arange(300) % 37, resamples=500, seed=seed),
        lambda seed: bootstrap_alpha(ratings, resamples=500, seed=seed),
        lambda seed: bootstrap_alpha(ratings, groups, resamples=500, seed=seed),
    ):
        first, again, other = run(11), run(11), run(12)
        assert first == again
        assert first.ci != other.ci
        assert first.value == other.value


def test_interval_contains_the_point_estimate() -> None:
    rng = np.random.default_rng(1)
    a, b = random_pairs(rng, ["A", "B", "C"], 400, 0.05)
    kappa = bootstrap_kappa(a, b)
    alpha = bootstrap_alpha(random_ratings(rng, 300, 4, 4, 0.2))
    for estimate in (kappa, alpha):
        assert isinstance(estimate, AgreementEstimate)
        assert estimate.value is not None
        assert estimate.ci is not None
        assert estimate.resamples == estimate.valid_resamples == 2000
        low, high = estimate.ci
        assert low < estimate.value < high
        assert high - low < 0.3


def test_groups_are_resampled_whole() -> None:
    # Every group holds the same four items, so any resample of whole groups is the full data
    # in proportion and gives exactly the full-data value; resampling items would scatter it.
    n_groups = 100
    a = ["yes", "no", "yes", "no"] * n_groups
    b = ["yes", "no", "yes", "yes"] * n_groups
    groups = np.repeat(np.arange(n_groups), 4)
    whole = bootstrap_kappa(a, b, groups, resamples=400)
    assert whole.value == pytest.approx(0.5, abs=TOL)
    assert whole.ci == [0.5, 0.5]
    items = bootstrap_kappa(a, b, resamples=400)
    assert items.ci is not None
    assert items.ci[0] < 0.45 and items.ci[1] > 0.55

    # Same for alpha, with three coders so every unit's diagonal share is a whole number.
    unit_block = [["a", "a", "a"], ["a", "b", "b"], ["b", "b", None], ["c", "a", "c"]]
    ratings = unit_block * n_groups
    whole_alpha = bootstrap_alpha(ratings, groups, resamples=400)
    assert whole_alpha.value is not None
    assert whole_alpha.ci == [whole_alpha.value, whole_alpha.value]
    items_alpha = bootstrap_alpha(ratings, resamples=400)
    assert items_alpha.ci is not None
    assert items_alpha.ci[1] - items_alpha.ci[0] > 0.05


def test_undefined_resamples_are_dropped_and_counted() -> None:
    # Two of three items are yes/yes and one no/no: a resample without the no/no item, or of
    # it alone, has pe == 1 (kappa undefined), with probability (2/3)^3 + (1/3)^3 = 1/3.
    a, b = ["yes", "yes", "no"], ["yes", "yes", "no"]
    estimate = bootstrap_kappa(a, b, resamples=1000, seed=2)
    counts = group_multiplicities(3, 1000, seed=2)
    undefined = int(((counts[:, 2] == 0) | (counts[:, 2] == 3)).sum())
    assert estimate.valid_resamples == 1000 - undefined
    assert 280 < undefined < 390
    assert estimate.ci == [1.0, 1.0]  # every defined resample agrees perfectly

    # Alpha: one unit of each value; a resample drawing one unit twice has a single value.
    ratings = [["a", "a"], ["b", "b"]]
    alpha = bootstrap_alpha(ratings, resamples=1000, seed=2)
    counts = group_multiplicities(2, 1000, seed=2)
    assert alpha.valid_resamples == int((counts == 1).all(axis=1).sum())
    assert 400 < alpha.valid_resamples < 600


def test_bootstrap_edge_cases_and_validation() -> None:
    assert bootstrap_kappa(["a"], [None], resamples=50) == AgreementEstimate(None, None, 0, 0, 50)
    assert bootstrap_alpha([[None, "a"]], groups=["g"], resamples=50) == AgreementEstimate(
        None, None, 0, 0, 50
    )
    assert bootstrap_kappa(["a", "b"], ["a", "b"], resamples=0).ci is None
    with pytest.raises(ValueError, match="groups has 2 items"):
        bootstrap_kappa(["a", "b", "a"], ["a", "b", "b"], groups=["g", "h"])
    with pytest.raises(ValueError, match="missing keys"):
        bootstrap_alpha([["a", "a"], ["b", "b"]], groups=["g", None])
    with pytest.raises(ValueError, match="level"):
        bootstrap_alpha([["a", "a"], ["b", "b"]], level=1.5)
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_kappa(["a"], ["a"], resamples=-1)
    with pytest.raises(ValueError, match="seed"):
        bootstrap_kappa(["a"], ["a"], seed=-3)


def test_kappa_pairs_equal_kappa_of_each_pair() -> None:
    # Coded once for all pairs (a shared category set), each pair's figures are still its own.
    rng = np.random.default_rng(4)
    columns: list[list[str | None]] = [
        [None if rng.random() < 0.2 else str(rng.integers(0, 3 + j % 2)) for _ in range(60)]
        for j in range(5)
    ]
    groups = [f"g{i // 3}" for i in range(60)]
    pairs = [(0, 1), (1, 4), (3, 2), (4, 0)]
    got = bootstrap_kappa_pairs(columns, pairs, groups, resamples=120, seed=2)
    want = [
        bootstrap_kappa(columns[i], columns[j], groups, resamples=120, seed=2) for i, j in pairs
    ]
    assert got == want
    assert all(g.value is not None and g.ci is not None for g in got)
    with pytest.raises(ValueError, match="outside the 5 columns"):
        bootstrap_kappa_pairs(columns, [(0, 5)])
