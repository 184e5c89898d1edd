"""Disagreements: threshold set and order, cleanlab as called directly, consensus k, flips."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from cleanlab.filter import find_label_issues
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput, NotFound
from app.ingest.judgebench import import_judgebench
from app.services.disagreements.lists import disagreements
from tests.ingest.test_helpers import O1_MINI, O1_MINI_JUDGE, PAIRS_GPT4O, read_jsonl
from tests.metrics.test_service import build

DETECTORS = ("d1", "d2", "d3")


def _items(n: int = 80) -> list[dict[str, Any]]:
    rng = np.random.default_rng(11)
    items = []
    for i in range(n):
        label = "A" if rng.random() < 0.5 else "B"
        truth = label if rng.random() < 0.8 else ("B" if label == "A" else "A")
        base = 0.75 if truth == "A" else 0.25
        scores = {d: float(np.clip(base + rng.normal(0, 0.2), 0, 1)) for d in DETECTORS}
        items.append({"id": f"x{i:03d}", "labels": {"reference": label}, "scores": scores})
    items[0]["scores"]["d1"] = 0.9  # a tie in confidence with items[1], broken by the others
    items[0]["labels"]["reference"] = "B"
    items[1]["scores"]["d1"] = 0.1
    items[1]["labels"]["reference"] = "A"
    del items[2]["scores"]["d1"]  # unscored items never disagree
    return items


@pytest.fixture
def seeded(factory: sessionmaker[Session]) -> list[dict[str, Any]]:
    items = _items()
    with transaction(factory) as session:
        build(session, items)
    return items


def _other(item: dict[str, Any], det: str) -> float | None:
    p = item["scores"].get(det)
    if p is None:
        return None
    return 1.0 - p if item["labels"]["reference"] == "A" else p


def test_threshold_exact_and_sorted(factory: sessionmaker[Session], seeded: list[Any]) -> None:
    with factory() as session:
        found = disagreements(session, "bench", ["d1"], min_confidence=0.7)
        limited = disagreements(session, "bench", ["d1"], min_confidence=0.7, limit=3)
    expected = {it["id"] for it in seeded if (_other(it, "d1") or 0) >= 0.7}
    assert {d.external_id for d in found.items} == expected and found.total == len(expected)

    # Most confident first; equal confidences: the items the other detectors doubt more
    # (mean P(other class)) first, then by id.
    def doubt(ext: str) -> float:
        item = next(it for it in seeded if it["id"] == ext)
        others = [o for det in DETECTORS if det != "d1" and (o := _other(item, det)) is not None]
        return -float(np.mean(others)) if others else 0.0

    keys = [(-(d.confidence or 0), doubt(d.external_id), d.external_id) for d in found.items]
    assert keys == sorted(keys)
    first, second = (next(d for d in found.items if d.external_id == x) for x in ("x000", "x001"))
    assert first.confidence == second.confidence  # the tie the secondary order settles
    for d in found.items:
        item = next(it for it in seeded if it["id"] == d.external_id)
        assert d.label == item["labels"]["reference"]
        assert d.score == pytest.approx(item["scores"]["d1"])
        assert d.confidence == pytest.approx(_other(item, "d1"))
    assert [d.external_id for d in limited.items] == [d.external_id for d in found.items[:3]]
    assert limited.total == found.total and found.positive == "A"
    assert found.items[0].as_dict().keys() == {
        "external_id",
        "label",
        "score",
        "confidence",
        "reason",
    }


def test_cleanlab_agrees_with_direct_call(
    factory: sessionmaker[Session], seeded: list[Any]
) -> None:
    with factory() as session:
        found = disagreements(session, "bench", ["d2"], mode="cleanlab")
    labels = np.array([int(it["labels"]["reference"] == "A") for it in seeded])
    p = np.array([it["scores"]["d2"] for it in seeded])
    ranked = find_label_issues(
        labels,
        np.column_stack([1 - p, p]),
        filter_by="confident_learning",
        return_indices_ranked_by="self_confidence",
    )
    assert len(ranked) > 0
    assert [d.external_id for d in found.items] == [seeded[i]["id"] for i in ranked]


def test_consensus_k(factory: sessionmaker[Session], seeded: list[Any]) -> None:
    with factory() as session:
        two = disagreements(session, "bench", DETECTORS, mode="consensus", k=2)
        every = disagreements(session, "bench", DETECTORS, mode="consensus")
    votes = {it["id"]: sum((_other(it, d) or 0) >= 0.8 for d in DETECTORS) for it in seeded}
    assert {d.external_id for d in two.items} == {i for i, v in votes.items() if v >= 2}
    assert {d.external_id for d in every.items} == {i for i, v in votes.items() if v == 3}
    assert every.k == 3 and len(every.items) < len(two.items)
    counts = [votes[d.external_id] for d in two.items]
    assert counts == sorted(counts, reverse=True)


def test_errors(factory: sessionmaker[Session], seeded: list[Any]) -> None:
    with transaction(factory) as session:
        build(session, [{"id": "z", "labels": {"reference": "A"}, "scores": {"raw": 3.5}}], "b2")
    with factory() as session:
        with pytest.raises(InvalidInput, match="unknown mode"):
            disagreements(session, "bench", ["d1"], mode="vote")
        with pytest.raises(InvalidInput, match="exactly one detector"):
            disagreements(session, "bench", ["d1", "d2"])
        with pytest.raises(InvalidInput, match="k must lie"):
            disagreements(session, "bench", ["d1", "d2"], mode="consensus", k=3)
        with pytest.raises(InvalidInput, match="min_confidence"):
            disagreements(session, "bench", ["d1"], min_confidence=1.5)
        with pytest.raises(InvalidInput, match="not probabilities"):
            disagreements(session, "b2", ["raw"])
        with pytest.raises(NotFound, match="no detector named 'ghost'"):
            disagreements(session, "bench", ["ghost"])
        with pytest.raises(InvalidInput, match="both orders"):
            disagreements(session, "bench", ["d1"], mode="judge-orders")


def test_judge_orders_lists_exactly_the_flips(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        import_judgebench(session, PAIRS_GPT4O, outputs=[O1_MINI])
    with factory() as session:
        found = disagreements(session, "judgebench", [O1_MINI_JUDGE], mode="judge-orders")
    mirror = {"A>B": "B>A", "B>A": "A>B", "A=B": "A=B"}
    expected = {
        str(r["pair_id"])
        for r in read_jsonl(O1_MINI)
        if None not in (d := [j["decision"] for j in r["judgments"]]) and d[0] != mirror[d[1]]
    }
    assert len(expected) == 110
    assert {d.external_id for d in found.items} == expected and found.total == 110
    assert all(d.label in ("A", "B") for d in found.items)


def test_judge_orders_ranked_by_confidence_then_margin(factory: sessionmaker[Session]) -> None:
    def pair(i: int, ab: str, ba: str, conf: tuple[float | None, float | None]) -> dict[str, Any]:
        logits = {"AB": {"A": 2.0 + i, "B": 0.0}, "BA": {"A": 0.0, "B": 1.0 + i}}
        return {
            "id": f"p{i}",
            "labels": {"reference": "A"},
            "judgments": {
                "verbal": {"AB": (ab, conf[0], None), "BA": (ba, conf[1], None)},
                "logits": {"AB": (ab, None, logits["AB"]), "BA": (ba, None, logits["BA"])},
            },
        }

    items = [
        pair(0, "A", "B", (90.0, 40.0)),  # flip, min confidence 40
        pair(1, "A", "B", (70.0, 80.0)),  # flip, min 70: ranked first
        pair(2, "A", "A", (99.0, 99.0)),  # no flip
        pair(3, "B", "A", (None, None)),  # flip without confidence: last
    ]
    with transaction(factory) as session:
        build(session, items)
    with factory() as session:
        verbal = disagreements(session, "bench", ["verbal"], mode="judge-orders")
        logit = disagreements(session, "bench", ["logits"], mode="judge-orders")
    assert [d.external_id for d in verbal.items] == ["p1", "p0", "p3"]
    assert [d.confidence for d in verbal.items] == [70.0, 40.0, None]
    # Margins: min(|2+i|, |1+i|) = 1 + i, so the later pair is more certain.
    assert [d.external_id for d in logit.items] == ["p3", "p1", "p0"]
    assert logit.items[0].confidence == 4.0
    assert logit.items[0].score == pytest.approx(1 / (1 + np.exp(-5.0)))
