"""Metric matrix: values equal scikit-learn and app.stats, one-class slices are null, cache keys."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput, NotFound
from app.ingest.judgebench import import_judgebench
from app.services.evidence.benchmarks import bump_data_version
from app.services.evidence.flips import recompute_flips
from app.services.evidence.labels import append_label
from app.services.metrics.report import MACRO, binary_target, metric_rows, metrics_report
from app.sql.cache import VersionedCache
from app.stats.metrics import choice_matched_auroc
from app.stats.summary import summarise
from app.tables import Benchmark, Detector, Instance, Judgment, Score
from tests.ingest.test_helpers import PAIRS_GPT4O, REWARD_OUTPUTS, read_jsonl
from tests.support.registry_support import row_keys

RESAMPLES = 200


def build(session: Session, items: list[dict[str, Any]], name: str = "bench") -> Benchmark:
    """A pairwise benchmark from plain dicts: id, group, payload, labels, scores, judgments.

    ``judgments`` maps a detector to ``{order: (choice, confidence, verdict_logits)}``.
    """
    bench = Benchmark(name=name, kind="pairwise")
    session.add(bench)
    session.flush()
    detectors: dict[str, Detector] = {}

    def detector(det: str) -> Detector:
        if det not in detectors:
            found = session.scalar(select(Detector).where(Detector.name == det))
            detectors[det] = found or Detector(name=det, kind="probe")
            session.add(detectors[det])
            session.flush()
        return detectors[det]

    for item in items:
        inst = Instance(
            benchmark_id=bench.id,
            external_id=item["id"],
            group_key=item.get("group", item["id"]),
            payload=item.get("payload", {}),
        )
        session.add(inst)
        session.flush()
        for label, value in item.get("labels", {}).items():
            append_label(session, inst.id, label, value, source="import")
        for det, score in item.get("scores", {}).items():
            session.add(Score(detector_id=detector(det).id, instance_id=inst.id, score=score))
        for det, orders in item.get("judgments", {}).items():
            for order, (choice, confidence, logits) in orders.items():
                session.add(
                    Judgment(
                        detector_id=detector(det).id,
                        instance_id=inst.id,
                        order=order,
                        choice=choice,
                        confidence=confidence,
                        verdict_logits=logits,
                    )
                )
    session.flush()
    return bench


def _close(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=0, abs_tol=1e-12)


def test_reward_models_equal_sklearn(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        import_judgebench(session, PAIRS_GPT4O, outputs=REWARD_OUTPUTS)
    with factory() as session:
        target, rows = metric_rows(session, "judgebench", resamples=RESAMPLES, cache=None)
        q = (
            select(Detector.name, Instance.external_id, Instance.group_key, Score.score)
            .join(Score, Score.detector_id == Detector.id)
            .join(Instance, Instance.id == Score.instance_id)
        )
        scores: dict[str, dict[str, tuple[str, float]]] = {}
        for det, ext, group, score in session.execute(q):
            scores.setdefault(det, {})[ext] = (group, score)
    assert (target.positive, target.negative) == ("A", "B")
    truth = {str(r["pair_id"]): int(r["label"] == "A>B") for r in read_jsonl(PAIRS_GPT4O)}
    assert [r.detector for r in rows] == sorted(scores) and len(rows) == 3
    for row in rows:
        ids = sorted(scores[row.detector])
        y = np.array([truth[i] for i in ids])
        p = np.array([scores[row.detector][i][1] for i in ids])
        groups = [scores[row.detector][i][0] for i in ids]
        assert row.n == 350 and row.slice is None
        assert _close(row.values["prevalence"], y.mean())
        assert _close(row.values["auroc"], roc_auc_score(y, p))
        assert _close(row.values["auprc"], average_precision_score(y, p))
        assert _close(row.values["brier"], brier_score_loss(y, p))
        assert row.values["choice_matched_auroc"] is None
        # Same data, groups and seed: the intervals are exactly app.stats' (item order is moot).
        expected = summarise(y, p, groups, resamples=RESAMPLES, seed=0)
        for metric in ("auroc", "auprc", "brier"):
            assert row.intervals[metric] == pytest.approx(expected[f"{metric}_ci"], abs=1e-12)
            low, high = row.intervals[metric]
            assert low < row.values[metric] < high


def _slice_items() -> list[dict[str, Any]]:
    rng = np.random.default_rng(3)
    items = []
    for i in range(24):
        source = ["mixed", "only-a", "only-b"][i % 3]
        label = {"only-a": "A", "only-b": "B"}.get(source, "A" if i % 2 else "B")
        ab = "A" if rng.random() < 0.5 else "B"
        ba = ab if rng.random() < 0.6 else ("B" if ab == "A" else "A")
        items.append(
            {
                "id": f"p{i:02d}",
                "group": f"q{i // 2}",
                "payload": {"source": source},
                "labels": {"reference": label},
                "scores": {"probe": float(rng.random())},
                "judgments": {"judge": {"AB": (ab, None, None), "BA": (ba, None, None)}},
            }
        )
    return items


def test_slices_one_class_null_and_macro(factory: sessionmaker[Session]) -> None:
    items = _slice_items()
    with transaction(factory) as session:
        build(session, items)
    with factory() as session:
        _, rows = metric_rows(
            session, "bench", slice_field="source", resamples=RESAMPLES, cache=None
        )
    by_slice = {row.slice: row for row in rows}
    assert list(by_slice) == [None, "mixed", "only-a", "only-b", MACRO]
    only_a, only_b, mixed = by_slice["only-a"], by_slice["only-b"], by_slice["mixed"]
    # One class: AUROC undefined (null, never 0.5); AUPRC is 1 with positives only, null without.
    assert only_a.values["auroc"] is None and only_a.intervals["auroc"] is None
    assert only_b.values["auroc"] is None and only_b.values["auprc"] is None
    assert only_a.values["auprc"] == 1.0 and only_a.values["prevalence"] == 1.0
    sub = [it for it in items if it["payload"]["source"] == "mixed"]
    y = [int(it["labels"]["reference"] == "A") for it in sub]
    p = [it["scores"]["probe"] for it in sub]
    assert _close(mixed.values["auroc"], roc_auc_score(y, p))
    assert _close(only_b.values["brier"], brier_score_loss([0] * 8, _probs(items, "only-b")))
    macro = by_slice[MACRO]
    # Macro-average over the slices where the metric is defined.
    assert macro.values["auroc"] == mixed.values["auroc"]
    assert _close(
        macro.values["brier"], np.mean([r.values["brier"] for r in (mixed, only_a, only_b)])
    )
    assert macro.n == 24 and macro.as_dict()["slice"] == MACRO
    # The keys rows had before the metric registry, and those of any metric registered since.
    assert set(mixed.as_dict()) == {
        "detector", "slice", "n", "prevalence", "auroc", "auroc_ci", "auprc", "auprc_ci",
        "brier", "brier_ci", "choice_matched_auroc", "choice_matched_auroc_ci",
    } | set(row_keys())  # fmt: skip


def _probs(items: list[dict[str, Any]], source: str) -> list[float]:
    return [it["scores"]["probe"] for it in items if it["payload"]["source"] == source]


def test_flip_label_set_choice_matched(factory: sessionmaker[Session]) -> None:
    items = _slice_items()
    with transaction(factory) as session:
        build(session, items)
        bench = session.scalar(select(Benchmark))
        assert bench is not None
        recompute_flips(session, bench.id)
    with factory() as session:
        target, rows = metric_rows(session, "bench", "flip:judge", resamples=RESAMPLES, cache=None)
    assert target.positive == "1"
    flips = [
        int(it["judgments"]["judge"]["AB"][0] != it["judgments"]["judge"]["BA"][0]) for it in items
    ]
    choice = [it["judgments"]["judge"]["AB"][0] for it in items]
    p = [it["scores"]["probe"] for it in items]
    # The judge is a scored detector too (its two-order P(A better)); the probe is measured here.
    assert [r.detector for r in rows] == ["judge", "probe"]
    row = rows[1]
    assert _close(row.values["auroc"], roc_auc_score(flips, p))
    expected = choice_matched_auroc(flips, p, choice)
    assert expected is not None and _close(row.values["choice_matched_auroc"], expected)
    assert row.intervals["choice_matched_auroc"] is not None


def test_cache_follows_data_version(factory: sessionmaker[Session]) -> None:
    items = _slice_items()
    cache = VersionedCache()
    with transaction(factory) as session:
        build(session, items)
    with factory() as session:
        _, first = metric_rows(session, "bench", resamples=RESAMPLES, cache=cache)
        _, again = metric_rows(session, "bench", resamples=RESAMPLES, cache=cache)
    assert cache.hits == 1 and again == first
    with transaction(factory) as session:
        for score in session.scalars(select(Score)):
            score.score = 1.0 - score.score
        bench = session.scalar(select(Benchmark))
        assert bench is not None
        bump_data_version(session, bench)
    with factory() as session:
        _, after = metric_rows(session, "bench", resamples=RESAMPLES, cache=cache)
    assert cache.misses == 2
    assert after[0].values["auroc"] == pytest.approx(1.0 - first[0].values["auroc"], abs=1e-12)


def test_errors_and_target_rule(factory: sessionmaker[Session]) -> None:
    items = _slice_items()
    items[0]["labels"]["grade"] = "good"
    items[1]["labels"]["grade"] = "bad"
    items[2]["labels"]["grade"] = "ugly"
    items[3]["labels"]["verdict"] = "yes"
    items[4]["labels"]["verdict"] = "no"
    with transaction(factory) as session:
        build(session, items)
    with factory() as session:
        with pytest.raises(NotFound, match="no benchmark named 'nope'"):
            metric_rows(session, "nope", cache=None)
        with pytest.raises(NotFound, match="no label set 'missing'"):
            metric_rows(session, "bench", "missing", cache=None)
        with pytest.raises(NotFound, match="no detector named 'ghost'"):
            metric_rows(session, "bench", detectors=["ghost"], cache=None)
        with pytest.raises(InvalidInput, match="name the positive class"):
            metric_rows(session, "bench", "verdict", cache=None)
        with pytest.raises(InvalidInput, match="exactly two classes"):
            metric_rows(session, "bench", "grade", positive="good", cache=None)
        target, rows = metric_rows(
            session, "bench", "verdict", positive="yes", resamples=0, cache=None
        )
        assert (target.positive, target.negative) == ("yes", "no")
        assert rows[0].n == 2 and rows[0].values["prevalence"] == 0.5
        report = metrics_report(session, "bench", resamples=RESAMPLES)
    assert binary_target("x", {"1"}).positive == "1"
    assert report["positive"] == "A" and report["judges"][0]["judge"] == "judge"
    assert report["rows"][0]["auroc_ci"] is not None
