"""Label-error rankers: the numerics against independent computations, and the stored rankers.

The MMLU-Redux subjects bundled with the project are the real data: 2,900 questions, 14 models'
answers and the experts' verdict on every label.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.mmlu_redux import import_mmlu_redux
from app.ingest.table import import_table
from app.services.evidence.benchmarks import get_benchmark
from app.services.jobs import queue as job_queue
from app.services.jobs.kind import enqueue
from app.services.jobs.rank_errors import RankErrorsParams
from app.settings import Settings
from app.stats import label_errors as le
from app.store import Store
from app.tables import Detector, Instance, Score
from tests.conftest import DATA
from tests.support.job_support import run_queue, store_on

MMLU = DATA / "mmlu-redux"
LETTERS = "ABCD"


def _csv_matrix() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Answers (coded), labels, defects and subjects read straight from the CSVs."""
    answers, labels, defects, subjects = [], [], [], []
    for path in sorted(MMLU.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            models = [
                c for c in reader.fieldnames or [] if "_" in c and "-" in c and "top" not in c
            ]
            for row in reader:
                answers.append(
                    [
                        -1 if not row[m] else (LETTERS.index(row[m]) if row[m] in LETTERS else -2)
                        for m in models
                    ]
                )
                labels.append(int(row["groundtruth_answer"]))
                defects.append(int(row["error_type"] != "ok"))
                subjects.append(path.stem)
    return np.array(answers), np.array(labels), np.array(defects), np.array(subjects)


def test_consensus_counts_off_option_answers_as_wrong_and_skips_missing() -> None:
    answers = np.array([[0, 0, 1, -1], [-2, 2, 2, 2], [-1, -1, -1, -1]])
    scores = le.consensus_scores(answers, np.array([0, 2, 1]), 3)
    np.testing.assert_allclose(scores[:2], [1 / 3, 1 / 4])
    assert np.isnan(scores[2])
    np.testing.assert_array_equal(
        le.vote_counts(answers, 3), [[2, 1, 0, 0], [0, 0, 3, 1], [0, 0, 0, 0]]
    )


def test_weighted_consensus_is_cleanlabs_crowdlab_posterior() -> None:
    from cleanlab.multiannotator import (
        _get_post_pred_probs_and_weights,
        get_label_quality_multiannotator,
    )

    answers, labels, _, _ = _csv_matrix()
    scores, weights = le.weighted_consensus_scores(answers, labels, 4)
    votes = np.where(answers >= 0, answers, np.nan).astype(float)
    prior = le.vote_distribution(answers, 4)
    quality = get_label_quality_multiannotator(votes, prior, verbose=False)["label_quality"]
    posterior, _, annotator_weight = _get_post_pred_probs_and_weights(
        votes,
        quality["consensus_label"].to_numpy(),
        prior,
        quality["num_annotations"].to_numpy(),
        quality["annotator_agreement"].to_numpy(),
        verbose=False,
    )
    np.testing.assert_allclose(scores, 1 - posterior[np.arange(len(labels)), labels], atol=1e-12)
    np.testing.assert_allclose(weights, annotator_weight, atol=1e-12)


def test_cleanlab_scores_are_one_minus_cleanlab_label_quality() -> None:
    from cleanlab.rank import get_label_quality_scores

    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.ones(4), size=200)
    labels = rng.integers(0, 4, size=200)
    want = 1 - get_label_quality_scores(labels, probs, method="normalized_margin")
    np.testing.assert_allclose(le.cleanlab_scores(labels, probs), want)


def test_the_combiner_never_puts_a_subject_on_both_sides_of_a_split() -> None:
    answers, labels, defects, subjects = _csv_matrix()
    weighted, _ = le.weighted_consensus_scores(answers, labels, 4)
    cleanlab = le.cleanlab_scores(labels, le.vote_distribution(answers, 4))
    features = le.ranker_features(answers, labels, 4, weighted=weighted, cleanlab=cleanlab)
    result = le.combine_rankers(features, defects, subjects)
    assert not np.isnan(result.oof).any() and (result.fold >= 0).all()
    splits = list(result.outer_splits) + [s for c in result.choices for s in c.inner_splits]
    assert len(splits) == 5 + 5 * 3
    for train, test in splits:
        assert set(subjects[train]).isdisjoint(subjects[test])
    # The real signal ranks defects well above chance...
    assert roc_auc_score(defects, result.oof) > 0.65
    # ...and a permuted target leaves nothing to learn.
    permuted = np.random.default_rng(0).permutation(defects)
    shuffled = le.combine_rankers(features, permuted, subjects)
    assert 0.4 <= roc_auc_score(permuted, shuffled.oof) <= 0.6


@pytest.fixture
def store(settings: Settings, engine: Any) -> Store:
    return store_on(settings, engine)


def _ranker_scores(session: Session, name: str) -> dict[str, float]:
    q = (
        select(Instance.external_id, Score.score)
        .join(Score, Score.instance_id == Instance.id)
        .join(Detector, Detector.id == Score.detector_id)
        .where(Detector.name == f"ranker:{name}")
    )
    return dict(session.execute(q).all())


@pytest.mark.slow
def test_rank_errors_job_on_mmlu_redux(store: Store) -> None:
    with transaction(store.factory) as s:
        import_mmlu_redux(s, [MMLU], "mmlu")
        enqueue(s, RankErrorsParams("mmlu"))
    assert run_queue(store) == 1
    with transaction(store.factory) as s:
        (job,) = job_queue.list_jobs(s)
        assert job.status == "done", job.error
        result = job.result or {}
        bench = get_benchmark(s, "mmlu")
        stored = {n: _ranker_scores(s, n) for n in result["rankers"]}
        details = bench.details["rankers"]
    assert set(result["rankers"]) == {
        "consensus",
        "weighted-consensus",
        "cleanlab",
        "dawid-skene",
        "one-coin",
        "item-response",
        "combined",
    }
    assert result["skipped"] == {"cleanlab-local": "no model answered with option probabilities"}
    # Independently from the CSVs: the plain consensus ranker and the verdicts. The stored
    # consensus is the fraction against the label, its ties ordered by the strongest other
    # option's share: within 1e-3 of the fraction, in the lexicographic order of the two.
    answers, labels, defects, subjects = _csv_matrix()
    rows = [f"{subject}:{i}" for subject in sorted(set(subjects)) for i in range(1, 101)]
    consensus = np.array([stored["consensus"][r] for r in rows])
    plain = le.consensus_scores(answers, labels, 4)
    np.testing.assert_allclose(consensus, plain, atol=1e-3)
    counts = le.vote_counts(answers, 4)[:, :4].astype(float)
    counts[np.arange(len(labels)), labels] = -1
    share = counts.max(axis=1) / (answers != -1).sum(axis=1)
    np.testing.assert_array_equal(
        np.argsort(consensus, kind="stable"), np.lexsort((np.arange(len(plain)), share, plain))
    )
    assert roc_auc_score(defects, consensus) == pytest.approx(0.719, abs=5e-4)
    for name, scores in stored.items():
        assert len(scores) == 2900
        s = np.array([scores[r] for r in rows])
        assert result["rankers"][name]["auroc"] == pytest.approx(
            roc_auc_score(defects, s), abs=1e-9
        )
        assert result["rankers"][name]["auprc"] == pytest.approx(
            average_precision_score(defects, s), abs=1e-9
        )
    # The default is a fixed rule, not the best AUPRC on these very verdicts.
    assert result["default"] == details["default"] == "consensus"
    # A rerun replaces the scores: still one per (ranker, item).
    with transaction(store.factory) as s:
        enqueue(s, RankErrorsParams("mmlu", ["consensus"]))
    assert run_queue(store) == 1
    with transaction(store.factory) as s:
        counts = dict(
            s.execute(
                select(Detector.name, func.count())
                .join(Score, Score.detector_id == Detector.id)
                .group_by(Detector.name)
            ).all()
        )
    assert counts["ranker:consensus"] == 2900


def test_consensus_on_an_answer_benchmark_uses_its_grader(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "arith.csv"
    rows = [
        ("2 + 2?", "4", "4", "four", "4.0"),
        ("3 * 3?", "9", "9", "9", "8"),
        ("10 / 4?", "2.5", "2", "2.50", "3"),
    ]
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["question", "gold", "m1", "m2", "m3"])
        writer.writerows(rows)
    with transaction(store.factory) as s:
        import_table(
            s,
            path,
            "answer",
            labels={"reference": "gold"},
            answers={"m1": "m1", "m2": "m2", "m3": "m3"},
            grader="numeric",
        )
        enqueue(s, RankErrorsParams("arith"))
    assert run_queue(store) == 1
    with transaction(store.factory) as s:
        (job,) = job_queue.list_jobs(s)
        assert job.status == "done", job.error
        scores = _ranker_scores(s, "consensus")
        assert set((job.result or {})["skipped"]) == {
            "weighted-consensus",
            "cleanlab",
            "dawid-skene",
            "one-coin",
            "item-response",
            "cleanlab-local",
            "combined",
        }
    assert scores == pytest.approx({"arith:1": 1 / 3, "arith:2": 1 / 3, "arith:3": 2 / 3})


def test_bad_requests_are_refused(store: Store) -> None:
    with transaction(store.factory) as s:
        import_mmlu_redux(s, [MMLU / "astronomy.csv"], "mmlu")
        with pytest.raises(InvalidInput, match="unknown ranker"):
            enqueue(s, RankErrorsParams("mmlu", ["psychic"]))
    with transaction(store.factory) as s:
        job = enqueue(s, RankErrorsParams("mmlu", ["cleanlab-local"]))
        assert job.kind == RankErrorsParams.kind
    run_queue(store)
    with transaction(store.factory) as s:
        failed = job_queue.get_job(s, job.id)
    assert failed.status == "failed" and "option probabilities" in (failed.error or "")
