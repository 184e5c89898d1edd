"""Several judges on one analysis set: shared pairs, shared folds, probes' gate, paired figures.

The two judges are real SmolLM2-135M-Instruct runs (forced and calibrated mode) on the
shortest JudgeBench pairs, recorded once by ``benchmarks/record_smollm2_judges.py`` (the fixture
says how many pairs; the script's default is 60).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.model_selection import GroupKFold, StratifiedGroupKFold
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.judgebench import import_judgebench
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.detectors import ensure_detector
from app.services.evidence.flips import recompute_flips
from app.services.metrics.bias_panel import judge_panel
from app.services.metrics.judge_analysis import analysis_set, shared_folds
from app.stats.cv_splits import strata_folds
from app.stats.estimability import probe_refusal
from app.stats.probes import baseline_matrix, nested_cv
from app.tables import Instance, Judgment
from tests.ingest.test_helpers import O1_MINI, O1_MINI_JUDGE, PAIRS_GPT4O, read_jsonl
from tests.support.recorded_judges import load_recorded_judges, recorded_verdicts

BENCH = "judgebench"


def _group(row: dict[str, Any]) -> str:
    """The JudgeBench importer's group of a raw pair (its README states the rule)."""
    if row["original_id"] is not None:
        return str(row["original_id"])
    return "question:" + hashlib.sha256(row["question"].encode()).hexdigest()[:16]


def _expected() -> tuple[dict[str, dict[str, tuple[str, str]]], dict[str, dict[str, Any]]]:
    """Each recorded judge's retained pairs ``{pair: (AB, BA)}`` and the raw JudgeBench rows."""
    rows = {r["pair_id"]: r for r in read_jsonl(PAIRS_GPT4O)}
    retained = {
        judge: {
            ext: (o["AB"]["choice"], o["BA"]["choice"])
            for ext, o in by_pair.items()
            if {"AB", "BA"} <= set(o) and "invalid" not in (o["AB"]["choice"], o["BA"]["choice"])
        }
        for judge, by_pair in recorded_verdicts().items()
    }
    return retained, rows


@pytest.fixture
def judges(factory: sessionmaker[Session]) -> list[str]:
    with transaction(factory) as s:
        # The o1-mini outputs carry their pairs (JudgeBench's GPT-4o pairs): one file to read.
        import_judgebench(s, [], outputs=[O1_MINI], benchmark=BENCH)
        return load_recorded_judges(s, BENCH)


@pytest.mark.filterwarnings("ignore:The least populated class in y")
def test_two_smollm2_judges_share_one_analysis_set_and_one_set_of_folds(
    factory: sessionmaker[Session], judges: list[str]
) -> None:
    retained, rows = _expected()
    n_judged = {len(v) for v in recorded_verdicts().values()}
    assert len(judges) == 2 and len(n_judged) == 1  # both judged the same pairs
    shared = set.intersection(*(set(retained[j]) for j in judges))
    with factory() as s:
        aset = analysis_set(s, BENCH, judges, slice_field="source")
        swapped = analysis_set(s, BENCH, judges[::-1], slice_field="source")
    # The pairs valid in both orders for both judges (in instance order), with each judge's
    # retention.
    assert set(aset.external_ids) == shared and swapped.external_ids == aset.external_ids
    shared_ids, n = aset.external_ids, len(shared)
    for r in aset.retention():
        assert (r["judged"], r["retained"], r["in_set"]) == (
            *n_judged,
            len(retained[r["judge"]]),
            n,
        )
    flip_counts = [sum(retained[j][e][0] != retained[j][e][1] for j in judges) for e in shared_ids]
    assert aset.flip_counts.tolist() == flip_counts
    groups = [_group(rows[e]) for e in shared_ids]
    assert aset.groups.tolist() == groups
    assert aset.slices.tolist() == [rows[e]["source"] for e in shared_ids]

    folds = shared_folds(aset, 5, seed=0)
    # One set of folds, whatever order the judges are named in.
    again = shared_folds(swapped, 5, seed=0)
    assert np.array_equal(folds.fold, again.fold)
    # Group integrity: every pair in one test fold, no group on two sides of any split.
    assert sorted(np.concatenate([t for _, t in folds.splits]).tolist()) == list(range(n))
    for train, test in folds.splits:
        assert not set(aset.groups[train]) & set(aset.groups[test])
    by_group: dict[str, set[int]] = {}
    for g, k in zip(groups, folds.fold, strict=True):
        by_group.setdefault(g, set()).add(int(k))
    assert all(len(ks) == 1 for ks in by_group.values())
    # Stratified by slice and by the number of judges that flip: scikit-learn's own splitters,
    # called directly on those strata, give the same folds (StratifiedGroupKFold when a stratum
    # spans at least 5 groups, else GroupKFold, as strata_folds documents).
    strata = [f"{rows[e]['source']}::{c}" for e, c in zip(shared_ids, flip_counts, strict=True)]
    codes = np.unique(groups, return_inverse=True)[1]
    labels = np.unique(strata, return_inverse=True)[1]
    spread = max(len({g for g, t in zip(groups, strata, strict=True) if t == u}) for u in strata)
    splitter = StratifiedGroupKFold if spread >= 5 else GroupKFold
    reference = splitter(n_splits=5, shuffle=True, random_state=0)
    expected_fold = np.empty(n, dtype=int)
    for k, (_, test) in enumerate(reference.split(np.zeros(n), labels, codes)):
        expected_fold[test] = k
    assert folds.fold.tolist() == expected_fold.tolist()

    # Every judge's probe and baselines run on those folds: the baselines here (features of
    # the AB verdict), each judge's nested CV handed the shared_ids splits and keeping them.
    lengths = np.array(
        [len(rows[e]["response_A"]) - len(rows[e]["response_B"]) for e in shared_ids]
    )
    verdicts = recorded_verdicts()
    for judge in judges:
        y = aset.flips_of(judge)
        reason = probe_refusal(y, folds.splits)
        assert folds.refusals[judge] == reason
        rate = y.mean()
        if not 0.05 <= rate <= 0.95:
            # SmolLM2 (forced, and calibrated too) picks the slot shown first in both orders on
            # these pairs: it flips them all, and the gate says so.
            assert reason == f"flip rate {100 * rate:.1f}% ({y.sum()} of {n}) is outside 5-95%"
        if reason is not None:
            continue
        ab = [verdicts[judge][e]["AB"] for e in shared_ids]
        margin = [v["verdict_logits"]["A"] - v["verdict_logits"]["B"] for v in ab]
        x = baseline_matrix(np.full(n, np.nan), margin, lengths, [v["choice"] == "A" for v in ab])
        cv = nested_cv(x, y, aset.groups, outer_splits=folds.splits, inner=2, lambdas=(1.0,))
        assert np.array_equal(cv.fold, folds.fold)


def reference_paired(
    first: tuple[np.ndarray, np.ndarray],
    second: tuple[np.ndarray, np.ndarray],
    groups: list[str],
    resamples: int,
    seed: int,
) -> tuple[float, float, float]:
    """Percentile interval and SD of the difference of two ratios of sums, on shared draws."""
    keys = sorted(set(groups))
    codes = np.array([keys.index(g) for g in groups])
    totals = [np.bincount(codes, weights=a, minlength=len(keys)) for a in (*first, *second)]
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        w = np.bincount(rng.integers(0, len(keys), len(keys)), minlength=len(keys))
        n1, d1, n2, d2 = (w @ t for t in totals)
        if d1 > 0 and d2 > 0:
            values.append(n1 / d1 - n2 / d2)
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high), float(np.std(values))


def test_paired_differences_of_two_judges_on_their_shared_pairs(
    factory: sessionmaker[Session], judges: list[str]
) -> None:
    # The o1-mini judge (imported with the pairs) beside the first SmolLM2 configuration.
    retained, rows = _expected()
    o1 = {}
    for r in read_jsonl(O1_MINI):
        first, second = (j["decision"] for j in r["judgments"])
        ab, ba = {"A>B": "A", "B>A": "B", "A=B": "tie"}, {"A>B": "B", "B>A": "A", "A=B": "tie"}
        if first in ab and second in ba:
            o1[r["pair_id"]] = (ab[first], ba[second])
    pair = [O1_MINI_JUDGE, judges[0]]
    verdicts = {O1_MINI_JUDGE: o1, judges[0]: retained[judges[0]]}
    shared = sorted(set(o1) & set(retained[judges[0]]))
    with factory() as s:
        panel = judge_panel(s, BENCH, pair, resamples=2000, seed=0)
    (diff,) = panel["differences"]
    assert (diff["first"], diff["second"], diff["n"]) == (*pair, len(shared))
    groups = [_group(rows[e]) for e in shared]
    counts = {
        "flip_rate": lambda ab, ba: (int(ab != ba), 1),
        "first_slot_preference": lambda ab, ba: (
            (ab == "A") + (ba == "B"),
            (ab != "tie") + (ba != "tie"),
        ),
        "tie_rate_ab": lambda ab, ba: (int(ab == "tie"), 1),
    }
    for figure, count in counts.items():
        per_judge = []
        for j in pair:
            c = np.array([count(*verdicts[j][e]) for e in shared], dtype=float)
            per_judge.append((c[:, 0], c[:, 1]))
        (n1, d1), (n2, d2) = per_judge
        assert diff[f"{figure}_first"] == pytest.approx(n1.sum() / d1.sum())
        assert diff[f"{figure}_second"] == pytest.approx(n2.sum() / d2.sum())
        assert diff[figure] == pytest.approx(n1.sum() / d1.sum() - n2.sum() / d2.sum())
        low, high, sd = reference_paired((n1, d1), (n2, d2), groups, 2000, seed=7)
        assert diff[f"{figure}_ci"][0] == pytest.approx(low, abs=0.35 * sd + 1e-9)
        assert diff[f"{figure}_ci"][1] == pytest.approx(high, abs=0.35 * sd + 1e-9)


def test_a_judge_that_flips_2_percent_of_pairs_is_refused_with_the_reason(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    fifty = tmp_path / PAIRS_GPT4O.name
    fifty.write_text("".join(PAIRS_GPT4O.read_text().splitlines(keepends=True)[:50]))
    with transaction(factory) as s:
        import_judgebench(s, [fifty], benchmark=BENCH)
        bench = get_benchmark(s, BENCH)
        ids = s.scalars(
            select(Instance.id).where(Instance.benchmark_id == bench.id).order_by(Instance.id)
        ).all()[:50]
        steady = ensure_detector(s, "steady", "judge")
        for k, i in enumerate(ids):
            # Always A, except the BA verdict of one pair in 50: a 2% flip rate.
            s.add(Judgment(instance_id=i, detector_id=steady.id, order="AB", choice="A"))
            s.add(
                Judgment(
                    instance_id=i, detector_id=steady.id, order="BA", choice="B" if k == 7 else "A"
                )
            )
        s.flush()
        recompute_flips(s, bench.id)
    with factory() as s:
        aset = analysis_set(s, BENCH, ["steady"])
        folds = shared_folds(aset, 5, seed=0)
        panel = judge_panel(s, BENCH, ["steady"], resamples=100)
    assert aset.n == 50 and int(aset.flips_of("steady").sum()) == 1
    assert folds.refusals == {"steady": "flip rate 2.0% (1 of 50) is outside 5-95%"}
    assert panel["analysis"]["folds"]["refusals"]["steady"].startswith("flip rate 2.0%")
    assert panel["judges"][0]["flip_rate"] == pytest.approx(0.02)
    with factory() as s, pytest.raises(InvalidInput, match="'nobody' has not judged"):
        analysis_set(s, BENCH, ["steady", "nobody"])


def test_the_gate_refuses_a_fold_without_both_classes_and_passes_a_balanced_set() -> None:
    y = np.array([1, 0] * 10)
    groups = np.arange(20) // 2  # each group holds one flip and one non-flip
    splits = strata_folds(y.astype(str), groups, 5, seed=0)
    assert probe_refusal(y, splits) is None
    # Flips confined to the first two groups: some fold's training or test part has none.
    lopsided = np.zeros(20, dtype=int)
    lopsided[:4] = 1
    folds = strata_folds(lopsided.astype(str), np.arange(20) // 4, 5, seed=0)
    reason = probe_refusal(lopsided, folds)
    assert reason is not None and "holds no flip" in reason
    assert probe_refusal(np.ones(20), splits) == "flip rate 100.0% (20 of 20) is outside 5-95%"
