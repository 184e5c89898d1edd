"""Two-order judges as detectors: P(A better) from verdict logits or choices, kept up to date."""

from __future__ import annotations

import math
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.flips import is_two_order_judge, recompute_flips
from app.services.evidence.judge_scores import DERIVED, Verdict, pair_score, sigmoid
from app.services.metrics.judge_summary import judge_summaries
from app.services.table.facets import benchmark_facets
from app.tables import Benchmark, Detector, Instance, Judgment, LabelEvent, Score

Orders = dict[str, tuple[str, dict[str, float] | None]]


def _p(la: float, lb: float) -> float:
    return 1.0 / (1.0 + math.exp(lb - la))


@pytest.mark.parametrize(
    ("ab", "ba", "expected"),
    [
        ("A", "A", 1.0),
        ("A", "B", 0.5),
        ("B", "A", 0.5),
        ("B", "B", 0.0),
        ("tie", "A", 0.75),
        ("tie", "tie", 0.5),
        ("A", "invalid", None),
        ("invalid", "invalid", None),
        ("A", None, None),
    ],
)
def test_choice_fallback(ab: str, ba: str | None, expected: float | None) -> None:
    got = pair_score(Verdict(ab), None if ba is None else Verdict(ba))
    if expected is None:
        assert got is None
    else:
        assert got is not None and got.score == expected
        assert got.details["rule"].startswith("mean over AB and BA of the choice")
        assert got.details["derived"] == DERIVED


def test_logits_in_both_orders_give_the_mean_probability() -> None:
    got = pair_score(Verdict("A", {"A": 2.0, "B": -1.0}), Verdict("B", {"A": 0.25, "B": 0.5}))
    assert got is not None
    assert got.score == pytest.approx((_p(2.0, -1.0) + _p(0.25, 0.5)) / 2, rel=1e-12)
    assert got.details["p_ab"] == pytest.approx(_p(2.0, -1.0))
    assert "sigmoid" in got.details["rule"]


@pytest.mark.parametrize(
    "ba_logits",
    [None, {"A": 1.0}, {"A": "1", "B": 0.0}, {"A": True, "B": 0.0}, {"A": math.inf, "B": 0.0}],
)
def test_logits_missing_or_unusable_in_one_order_fall_back_to_choices(
    ba_logits: dict[str, Any] | None,
) -> None:
    got = pair_score(Verdict("A", {"A": 3.0, "B": 0.0}), Verdict("B", ba_logits))
    assert got is not None and got.score == 0.5 and "choice" in got.details["rule"]


def test_sigmoid_is_stable_at_the_extremes() -> None:
    assert sigmoid(800.0) == 1.0 and sigmoid(-800.0) == 0.0
    assert sigmoid(0.0) == 0.5 and sigmoid(-2.0) == pytest.approx(1 - sigmoid(2.0))


def test_reward_models_are_not_two_order_judges() -> None:
    assert is_two_order_judge("judge", ["AB", "BA", "AB-repeat"])
    assert not is_two_order_judge("judge", ["AB", "AB-repeat"])
    assert not is_two_order_judge("reward_model", ["AB", "BA"])


def _seed(session: Session, judges: dict[str, tuple[str, dict[str, Orders]]]) -> Benchmark:
    """A benchmark with pairs p1.. and, per detector name, (kind, {pair: {order: verdict}})."""
    bench = Benchmark(name="b", kind="pairwise")
    session.add(bench)
    session.flush()
    pairs = sorted({p for _, by_pair in judges.values() for p in by_pair})
    ids = {}
    for ext in pairs:
        inst = Instance(benchmark_id=bench.id, external_id=ext, group_key=ext, payload={})
        session.add(inst)
        session.flush()
        ids[ext] = inst.id
    for name, (kind, by_pair) in judges.items():
        det = Detector(name=name, kind=kind)
        session.add(det)
        session.flush()
        for ext, orders in by_pair.items():
            for order, (choice, logits) in orders.items():
                session.add(
                    Judgment(
                        instance_id=ids[ext],
                        detector_id=det.id,
                        order=order,
                        choice=choice,
                        verdict_logits=logits,
                    )
                )
    session.flush()
    return bench


def _scores(session: Session, name: str) -> dict[str, float]:
    q = (
        select(Instance.external_id, Score.score)
        .join(Score, Score.instance_id == Instance.id)
        .join(Detector, Detector.id == Score.detector_id)
        .where(Detector.name == name)
    )
    return dict(session.execute(q).all())


LOGITS_AB = {"A": 1.5, "B": -0.5}
LOGITS_BA = {"A": -0.25, "B": 0.75}


def test_recompute_derives_judge_scores_and_skips_reward_models(
    factory: sessionmaker[Session],
) -> None:
    with transaction(factory) as session:
        bench = _seed(
            session,
            {
                "judge": (
                    "judge",
                    {
                        "p1": {"AB": ("A", LOGITS_AB), "BA": ("B", LOGITS_BA)},
                        "p2": {"AB": ("A", None), "BA": ("A", None)},
                        "p3": {"AB": ("B", None), "BA": ("tie", None)},
                        "p4": {"AB": ("A", None), "BA": ("invalid", None)},
                        "p5": {"AB": ("A", None)},
                    },
                ),
                "rm": (
                    "reward_model",
                    {"p1": {"AB": ("A", None), "BA": ("B", None)}},
                ),
            },
        )
        first = recompute_flips(session, bench.id)
        assert (first.judges, first.retained, first.scores) == (1, 3, 3)
        assert _scores(session, "judge") == {
            "p1": pytest.approx((_p(1.5, -0.5) + _p(-0.25, 0.75)) / 2),
            "p2": 1.0,
            "p3": 0.25,
        }
        # The reward model gets neither a flip label set nor a derived score nor a summary.
        names = set(session.scalars(select(LabelEvent.label_name).distinct()))
        assert names == {"flip:judge"}
        assert _scores(session, "rm") == {}
        assert [s.judge for s in judge_summaries(session, "b", cache=None)] == ["judge"]
        assert benchmark_facets(session, bench).summary.judges == 1

        again = recompute_flips(session, bench.id)
        assert again.scores == 0 and not again.changed  # idempotent

        # p2's BA becomes invalid (score deleted), p4's becomes valid (score added), p1 loses
        # its BA logits (the choices decide).
        for ext, choice, logits in (("p2", "invalid", None), ("p4", "B", None), ("p1", "B", None)):
            judgment = session.scalar(
                select(Judgment)
                .join(Instance, Instance.id == Judgment.instance_id)
                .join(Detector, Detector.id == Judgment.detector_id)
                .where(
                    Instance.external_id == ext, Judgment.order == "BA", Detector.name == "judge"
                )
            )
            assert judgment is not None
            judgment.choice, judgment.verdict_logits = choice, logits
        session.flush()
        third = recompute_flips(session, bench.id)
        assert third.scores == 3 and third.changed
        assert _scores(session, "judge") == {"p1": 0.5, "p3": 0.25, "p4": 0.5}
        assert session.scalar(select(func.count()).select_from(Score)) == 3


def test_an_imported_score_of_the_judge_is_kept(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        bench = _seed(
            session,
            {
                "judge": (
                    "judge",
                    {
                        "p1": {"AB": ("A", None), "BA": ("A", None)},
                        "p2": {"AB": ("B", None), "BA": ("B", None)},
                    },
                )
            },
        )
        judge_id = session.scalar(select(Detector.id).where(Detector.name == "judge"))
        p1 = session.scalar(select(Instance.id).where(Instance.external_id == "p1"))
        session.add(Score(detector_id=judge_id, instance_id=p1, score=0.3, details={"col": "x"}))
        session.flush()
        summary = recompute_flips(session, bench.id)
        assert summary.scores == 1
        assert _scores(session, "judge") == {"p1": 0.3, "p2": 0.0}


def test_bundled_judgebench_gives_o1_mini_a_reference_row(factory: sessionmaker[Session]) -> None:
    """The demo's JudgeBench files: o1-mini beside the three reward models on `reference`."""
    from sklearn.metrics import roc_auc_score

    from app.cli.demo import demo_files
    from app.ingest.judgebench import import_judgebench
    from app.services.metrics.report import metrics_report
    from app.settings import BUNDLED_DATA
    from tests.ingest.test_helpers import O1_MINI_JUDGE, current_labels

    pairs, outputs, _ = demo_files(BUNDLED_DATA)
    with transaction(factory) as session:
        import_judgebench(session, pairs, outputs=outputs)
    with transaction(factory) as session:
        again = import_judgebench(session, pairs, outputs=outputs)
        assert again.derived_labels == 0 and again.evidence_added == 0
        bench = session.scalar(select(Benchmark).where(Benchmark.name == "judgebench"))
        assert bench is not None and bench.data_version == 1  # the rerun changed nothing
        report = metrics_report(session, "judgebench", "reference", resamples=200)
        rows = {r["detector"]: r for r in report["rows"] if r["slice"] is None}
        assert O1_MINI_JUDGE in rows
        assert sum(name.startswith("reward_model/") for name in rows) == 3
        labels = sorted(session.scalars(select(LabelEvent.label_name).distinct()).all())
        assert labels == ["flip:" + O1_MINI_JUDGE, "reference"]
        reference = current_labels(session, bench.id, "reference")
        scores = _scores(session, O1_MINI_JUDGE)
        assert len(scores) == rows[O1_MINI_JUDGE]["n"] > 300
        ids = sorted(scores)
        y = [reference[i] == "A" for i in ids]
        expected = roc_auc_score(y, [scores[i] for i in ids])
        assert rows[O1_MINI_JUDGE]["auroc"] == pytest.approx(expected, abs=1e-12)
        assert 0.5 < expected < 1.0
