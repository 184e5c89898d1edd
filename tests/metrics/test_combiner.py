"""The learned combiner: its features, its fit and frozen form, the rank-errors job around it.

Real data: the MMLU-Redux subjects bundled with the project (14 models' answers and the experts'
verdicts); the numbers are checked against numpy and scikit-learn computed here.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from scipy.special import expit
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler
from sqlalchemy import delete, select
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.errors import InvalidInput
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.accounts.users import Principal
from app.services.evidence.benchmarks import get_benchmark
from app.services.jobs import queue as job_queue
from app.services.jobs.kind import enqueue
from app.services.jobs.rank_errors import RankErrorsParams
from app.services.metrics.rankers import DEFAULT_RULE, RANKERS, rank_inputs
from app.services.metrics.verdicts import review_verdicts
from app.services.review import queues
from app.settings import Settings
from app.stats import combiner as cb
from app.stats import label_errors as le
from app.stats.probes import lambda_to_c
from app.store import Store
from app.tables import Detector, Instance, LabelEvent, Role, Score
from tests.metrics.test_rankers import MMLU, _csv_matrix
from tests.support.job_support import run_job, run_queue, store_on


def test_features_equal_a_direct_count() -> None:
    # 4 items x 3 models, 3 options; model c is the least reliable; items 0-1 in slice "s",
    # 2-3 in slice "t".
    answers = np.array([[0, 0, 1], [1, 1, -1], [2, -2, 0], [0, 0, 2]])
    labels = np.array([0, 2, 2, 1])
    feats = cb.combiner_features(
        answers, labels, 3, models=["a", "b", "c"], groups=["s", "s", "t", "t"],
        scores={"x": np.array([0.1, 0.2, np.nan, 0.4])},
    )  # fmt: skip
    col = dict(zip(feats.names, feats.values.T, strict=True))
    np.testing.assert_array_equal(col["ranker:x"][:2], [0.1, 0.2])
    assert np.isnan(col["ranker:x"][2])
    np.testing.assert_allclose(col["plurality_strength"], [2 / 3, 1, 1 / 3, 2 / 3])
    np.testing.assert_allclose(col["plurality_margin"], [0, 1, 0, 2 / 3])
    h3 = -3 * (1 / 3) * np.log2(1 / 3)
    h2 = -(2 / 3) * np.log2(2 / 3) - (1 / 3) * np.log2(1 / 3)
    np.testing.assert_allclose(col["vote_entropy"], [h2, 0, h3, h2])
    np.testing.assert_allclose(col["off_options"], [0, 0, 1 / 3, 0])
    np.testing.assert_array_equal(col["disagrees:a"], [0, 1, 0, 1])
    np.testing.assert_array_equal(col["disagrees:c"][[0, 2, 3]], [1, 1, 1])
    assert np.isnan(col["disagrees:c"][1])
    # Agreement with the plurality (0, 1, 0 by the first of a tie, 0): a 3/4, b 3/4, c 1/3;
    # a tie keeps column order.
    np.testing.assert_array_equal(col["disagrees:rank1"], col["disagrees:a"])
    np.testing.assert_array_equal(col["disagrees:rank2"], col["disagrees:b"])
    consensus = le.consensus_scores(answers, labels, 3)
    slice_mean = np.array([consensus[:2].mean()] * 2 + [consensus[2:].mean()] * 2)
    np.testing.assert_allclose(col["slice_disagreement"], slice_mean)
    np.testing.assert_allclose(col["disagreement_vs_slice"], consensus - slice_mean)
    np.testing.assert_allclose(col["slice_log_size"], np.log(2))


@pytest.fixture(scope="module")
def mmlu_features() -> tuple[le.RankerFeatures, np.ndarray, np.ndarray]:
    """The combiner's features of the bundled MMLU-Redux items, their verdicts and subjects."""
    answers, labels, defects, subjects = _csv_matrix()
    scores = {"consensus": le.consensus_scores(answers, labels, 4)}
    models = [f"m{j}" for j in range(answers.shape[1])]
    feats = cb.combiner_features(answers, labels, 4, models=models, groups=subjects, scores=scores)
    return feats, defects, subjects


def test_the_refit_is_sklearns_and_the_frozen_form_applies_by_name(
    mmlu_features: tuple[le.RankerFeatures, np.ndarray, np.ndarray],
) -> None:
    feats, defects, subjects = mmlu_features
    fit = cb.fit_combiner(feats, defects, subjects)
    assert fit.folds["groups"] == "slices" and not np.isnan(fit.oof).any()
    frozen = cb.Combiner.from_dict(fit.combiner.to_dict())
    # The refit is scikit-learn's logistic regression at the chosen lambda.
    x = frozen.matrix(feats)
    z = StandardScaler().fit_transform(x)
    ref = LogisticRegression(C=lambda_to_c(frozen.probe.lam, len(defects)), tol=1e-10)
    ref.fit(z, defects)
    np.testing.assert_allclose(frozen.predict(feats), ref.predict_proba(z)[:, 1], atol=1e-6)
    # Applied by name: columns in another order, one missing (enters at its training mean),
    # one the combiner never saw (ignored).
    names = list(feats.names)
    order = np.random.default_rng(0).permutation(len(names))[1:]
    dropped = names[int(np.setdiff1d(np.arange(len(names)), order)[0])]
    shuffled = le.RankerFeatures(
        (*[names[i] for i in order], "unknown"),
        np.column_stack([feats.values[:, order], np.ones(len(defects))]),
    )
    c = names.index(dropped)
    x_fill = x.copy()
    x_fill[:, c] = frozen.fill[c]
    p = frozen.probe
    want = expit(((x_fill - p.mean) / p.scale) @ p.coef + p.intercept)
    np.testing.assert_allclose(frozen.predict(shuffled), want, atol=1e-12)


def test_permuted_verdicts_leave_nothing_to_learn(
    mmlu_features: tuple[le.RankerFeatures, np.ndarray, np.ndarray],
) -> None:
    feats, defects, subjects = mmlu_features
    permuted = np.random.default_rng(1).permutation(defects)
    fit = cb.fit_combiner(feats, permuted, subjects)
    assert abs(roc_auc_score(permuted, fit.oof) - 0.5) < 0.05


@pytest.fixture
def store(settings: Settings, engine: Any) -> Store:
    return store_on(settings, engine)


SOURCE = ["logical_fallacies", "professional_law", "college_chemistry", "formal_logic"]
TARGET = ["abstract_algebra"]


def _scores(s: Any, bench: str, detector: str) -> dict[int, float]:
    q = (
        select(Score.instance_id, Score.score)
        .join(Detector, Detector.id == Score.detector_id)
        .join(Instance, Instance.id == Score.instance_id)
        .where(Detector.name == detector, Instance.benchmark_id == get_benchmark(s, bench).id)
    )
    return {int(i): float(v) for i, v in s.execute(q).all()}


def test_train_on_some_subjects_score_every_item_and_apply_frozen(
    store: Store, cli_store: Settings
) -> None:
    with transaction(store.factory) as s:
        import_mmlu_redux(s, [MMLU / f"{n}.csv" for n in SOURCE], "src")
        import_mmlu_redux(s, [MMLU / f"{n}.csv" for n in TARGET], "dst")
        src = get_benchmark(s, "src").id
        # The experts' verdicts on one subject are withheld: its items have no verdict.
        held = select(Instance.id).where(
            Instance.benchmark_id == src, Instance.group_key == "formal_logic"
        )
        s.execute(
            delete(LabelEvent).where(
                LabelEvent.instance_id.in_(held), LabelEvent.label_name != "reference"
            )
        )
        dst = get_benchmark(s, "dst").id
        mine = select(Instance.id).where(Instance.benchmark_id == dst)
        s.execute(
            delete(LabelEvent).where(
                LabelEvent.instance_id.in_(mine), LabelEvent.label_name != "reference"
            )
        )
    result = run_job(store, "rank_errors", {"benchmark": "src"})
    with transaction(store.factory) as s:
        combined = _scores(s, "src", "ranker:combined")
        details = get_benchmark(s, "src").details["rankers"]
        n_held = len(s.scalars(held).all())
    assert len(combined) == 400 and n_held == 100
    print_ = result["combiner"]["fingerprint"]
    assert print_["benchmark"] == "src" and print_["label"] == "defect"
    assert print_["items"] == 300 and "disagrees:rank1" in print_["features"]
    assert details["combiner"]["fingerprint"] == print_
    assert result["default"] == "consensus" and details["rule"] == DEFAULT_RULE
    # A benchmark with no frozen combiner cannot be applied from.
    with transaction(store.factory) as s, pytest.raises(InvalidInput, match="no frozen combiner"):
        enqueue(s, RankErrorsParams("src", apply_from="dst"))
    # The frozen combiner ranks the other benchmark, which has no verdict of its own.
    runner = CliRunner()
    queued = runner.invoke(cli, ["rank-errors", "dst", "--apply-from", "src"])
    assert queued.exit_code == 0, queued.output
    assert run_queue(store) == 1
    with transaction(store.factory) as s:
        (applied_job,) = [j for j in job_queue.list_jobs(s) if j.params.get("apply_from")]
        applied = applied_job.result or {}
    assert applied["combiner"]["applied"] and applied["combiner"]["fingerprint"] == print_
    # The list of the frozen combiner's scores holds every item, none with a verdict.
    listed = runner.invoke(
        cli,
        ["disagreements", "dst", "-d", "ranker:combined", "--mode", "label-errors",
         "--limit", "1000", "--json"],
    )  # fmt: skip
    assert listed.exit_code == 0, listed.output
    found = json.loads(listed.stdout)
    assert found["total"] == 100 and len(found["items"]) == 100
    with transaction(store.factory) as s:
        scores = _scores(s, "dst", "ranker:combined")
        inputs = rank_inputs(s, "dst")
    assert np.isnan(inputs.train).all() and len(scores) == 100
    frozen = cb.Combiner.from_dict(details["combiner"]["combiner"])
    m = inputs.matrix
    # Every ranker the job stored for dst that does not learn from verdicts is a feature.
    others = {
        n: _scores_by_row(store, "dst", f"ranker:{n}", m.instance_ids)
        for n, ranker in RANKERS.items()
        if not ranker.needs_training and not ranker.needs_local
    }
    feats = cb.combiner_features(
        m.answer_codes(inputs.voters), m.label_codes(), 4,
        models=[m.models[j] for j in inputs.voters], groups=m.groups, scores=others,
    )  # fmt: skip
    want = frozen.predict(feats)
    got = np.array([scores[int(i)] for i in m.instance_ids])
    np.testing.assert_allclose(got, want, atol=1e-9)


def _scores_by_row(store: Store, bench: str, detector: str, ids: np.ndarray) -> np.ndarray:
    with transaction(store.factory) as s:
        found = _scores(s, bench, detector)
    return np.array([found[int(i)] for i in ids])


def test_the_default_reads_no_evaluation_label_and_review_verdicts_train(store: Store) -> None:
    with transaction(store.factory) as s:
        import_mmlu_redux(s, [MMLU / f"{n}.csv" for n in SOURCE[:3]], "mmlu")
    first = run_job(store, "rank_errors", {"benchmark": "mmlu"})
    # Flip every evaluation label: a ranker chosen on them would change; the default does not.
    with transaction(store.factory) as s:
        rows = s.execute(select(LabelEvent).where(LabelEvent.label_name == "defect")).scalars()
        for event in rows:
            event.value = "0" if event.value == "1" else "1"
    flipped = run_job(store, "rank_errors", {"benchmark": "mmlu"})
    assert first["default"] == flipped["default"] == "consensus"
    assert {q["auprc"] for q in first["rankers"].values()} != {
        q["auprc"] for q in flipped["rankers"].values()
    }
    # Without errata, the resolved outcomes of review are the verdicts.
    with transaction(store.factory) as s:
        s.execute(delete(LabelEvent).where(LabelEvent.label_name.in_(["defect", "errata"])))
        bench = get_benchmark(s, "mmlu")
        ids = list(s.scalars(select(Instance.id).where(Instance.benchmark_id == bench.id)))
        queue = queues.create_queue(
            s, bench, ids[:60], name="q", label_name="reference", source="filter", blind=False
        )
        boss = Principal(user_id=0, name="boss", role=Role.admin, token_id=0)
        answers = dict(
            s.execute(
                select(LabelEvent.instance_id, LabelEvent.value).where(
                    LabelEvent.label_name == "reference", LabelEvent.instance_id.in_(ids[:60])
                )
            ).all()
        )
        for n, iid in enumerate(ids[:60]):
            value = "question unclear" if n % 4 == 0 else answers[iid]
            queues.record(
                s, queue, iid, boss, kind="adjudication", value=value,
                seen_version=queues.label_version(s, iid, "reference"),
            )  # fmt: skip
        verdicts = review_verdicts(s, bench.id, "defect")
    assert verdicts == {iid: int(n % 4 == 0) for n, iid in enumerate(ids[:60])}
    reviewed = run_job(store, "rank_errors", {"benchmark": "mmlu"})
    assert reviewed["combiner"]["fingerprint"]["items"] == 60
    assert reviewed["combiner"]["fingerprint"]["defects"] == 15
