"""Derived flip labels: the rule, append-only updates, retractions, and judges without BA."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.flips import flip_label_name, flip_value, recompute_flips
from app.services.evidence.labels import label_history
from app.tables import Benchmark, Detector, Instance, Judgment, LabelEvent
from tests.ingest.test_helpers import current_labels


@pytest.mark.parametrize(
    ("ab", "ba", "expected"),
    [
        ("A", "A", "0"),
        ("B", "B", "0"),
        ("tie", "tie", "0"),
        ("A", "B", "1"),
        ("B", "A", "1"),
        ("tie", "A", "1"),
        ("B", "tie", "1"),
        ("A", "invalid", None),
        ("invalid", "invalid", None),
        ("A", None, None),
    ],
)
def test_flip_rule(ab: str, ba: str | None, expected: str | None) -> None:
    assert flip_value(ab, ba) == expected


def _setup(session: Session, choices: dict[str, tuple[str | None, str | None]]) -> Benchmark:
    bench = Benchmark(name="b", kind="pairwise")
    judge = Detector(name="j", kind="judge")
    session.add_all([bench, judge])
    session.flush()
    for ext, orders in choices.items():
        inst = Instance(benchmark_id=bench.id, external_id=ext, group_key=ext, payload={})
        session.add(inst)
        session.flush()
        for order, choice in zip(("AB", "BA"), orders, strict=True):
            if choice is not None:
                session.add(
                    Judgment(instance_id=inst.id, detector_id=judge.id, order=order, choice=choice)
                )
    session.flush()
    return bench


def _set_choice(session: Session, ext: str, order: str, choice: str) -> None:
    judgment = session.scalar(
        select(Judgment)
        .join(Instance, Instance.id == Judgment.instance_id)
        .where(Instance.external_id == ext, Judgment.order == order)
    )
    assert judgment is not None
    judgment.choice = choice
    session.flush()


def test_recompute_appends_only_changes_and_retracts(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        bench = _setup(
            session,
            {"p1": ("A", "A"), "p2": ("A", "B"), "p3": ("tie", "B"), "p4": ("A", "invalid")},
        )
        first = recompute_flips(session, bench.id)
        assert (first.judges, first.retained, first.flips, first.events) == (1, 3, 2, 3)
        assert current_labels(session, bench.id, "flip:j") == {"p1": "0", "p2": "1", "p3": "1"}

        again = recompute_flips(session, bench.id)
        assert again.events == 0  # nothing changed, nothing appended

        _set_choice(session, "p2", "BA", "invalid")  # p2 stops being retained
        _set_choice(session, "p4", "BA", "B")  # p4 becomes retained, a flip
        _set_choice(session, "p1", "BA", "tie")  # p1 becomes a flip
        third = recompute_flips(session, bench.id)
        assert third.events == 3
        assert current_labels(session, bench.id, "flip:j") == {
            "p1": "1",
            "p2": None,
            "p3": "1",
            "p4": "1",
        }
        p2 = session.scalar(select(Instance.id).where(Instance.external_id == "p2"))
        history = [(e.value, e.source) for e in label_history(session, p2)]
        assert history == [("1", "derived"), (None, "derived")]
        assert "BA chose invalid" in label_history(session, p2)[-1].reason


def test_judge_without_ba_gets_no_flip_labels(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        bench = _setup(session, {"p1": ("A", None), "p2": ("B", None)})
        summary = recompute_flips(session, bench.id)
        assert (summary.judges, summary.events) == (0, 0)
        count = session.scalar(select(LabelEvent.id).where(LabelEvent.label_name == "flip:j"))
        assert count is None


def test_retraction_when_judgments_disappear(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        bench = _setup(session, {"p1": ("A", "B"), "p2": ("A", "A")})
        recompute_flips(session, bench.id)
        p1 = session.scalar(select(Instance.id).where(Instance.external_id == "p1"))
        for judgment in session.scalars(select(Judgment).where(Judgment.instance_id == p1)):
            session.delete(judgment)
        session.flush()
        summary = recompute_flips(session, bench.id)
        assert summary.events == 1
        assert current_labels(session, bench.id, "flip:j") == {"p1": None, "p2": "0"}


def test_flip_label_name() -> None:
    assert flip_label_name("arena_hard/o1-mini") == "flip:arena_hard/o1-mini"


def test_judge_losing_every_judgment_is_retracted(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        bench = _setup(session, {"p1": ("A", "B"), "p2": ("B", "B")})
        recompute_flips(session, bench.id)
        for judgment in session.scalars(select(Judgment)):
            session.delete(judgment)
        session.flush()
        summary = recompute_flips(session, bench.id)
        assert (summary.judges, summary.events) == (0, 2)
        assert current_labels(session, bench.id, "flip:j") == {"p1": None, "p2": None}
