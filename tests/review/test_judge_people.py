"""Judges against people, and the two judge queue sources, on a seeded benchmark of pair votes.

Every expectation is recomputed here from the rows the test wrote: the resolution rule applied
by hand, each judge's folded verdict by hand, then scikit-learn's kappa, confusion matrix and
AUROC.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score, confusion_matrix, roc_auc_score
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput
from app.services.accounts.users import Principal, create_user
from app.services.evidence.detectors import ensure_detector
from app.services.evidence.flips import recompute_flips
from app.services.evidence.labels import append_label, append_labels
from app.services.review import queues
from app.services.review.judge_people import judges_vs_people, people_view, queue_people_view
from app.services.review.queue_sources import SOURCES, source_items
from app.services.review.review_actions import NewQueue, create_queue_from_source
from app.tables import Benchmark, Detector, Instance, Judgment, Role, Score

BENCH = "pairs"
LABEL = "human"
VALUES = ["A", "B", "tie"]
N_ITEMS, N_GROUPS = 60, 15
TWO, ONE = "judge/two-orders", "judge/ab-only"
PEOPLE = ("ann", "bob", "cy")


@dataclass
class World:
    """What the test wrote: per item its judgments, votes and adjudication."""

    ids: list[int] = field(default_factory=list)
    ext: dict[int, str] = field(default_factory=dict)
    groups: dict[int, str] = field(default_factory=dict)
    orders: dict[str, dict[int, dict[str, str]]] = field(default_factory=dict)
    votes: dict[int, dict[str, str]] = field(default_factory=dict)
    adjudicated: dict[int, str | None] = field(default_factory=dict)


def _build(factory: sessionmaker[Session]) -> World:
    rng = np.random.default_rng(24)
    world = World(orders={TWO: {}, ONE: {}})
    with transaction(factory) as s:
        bench = Benchmark(name=BENCH, kind="pairwise", source="test", data_version=1)
        s.add(bench)
        s.flush()
        judges = {name: ensure_detector(s, name, "judge").id for name in (TWO, ONE)}
        for i in range(N_ITEMS):
            inst = Instance(
                benchmark_id=bench.id,
                external_id=f"p{i:02d}",
                group_key=f"q{i % N_GROUPS}",
                payload={"prompt": f"question {i}", "response_a": "a", "response_b": "b"},
            )
            s.add(inst)
            s.flush()
            world.ids.append(inst.id)
            world.ext[inst.id], world.groups[inst.id] = inst.external_id, inst.group_key
            truth = str(rng.choice(VALUES, p=[0.45, 0.4, 0.15]))
            for name, orders in ((TWO, ("AB", "BA")), (ONE, ("AB",))):
                chosen = {}
                for order in orders:
                    roll = rng.random()
                    choice = (
                        "invalid"
                        if roll < 0.05
                        else truth
                        if roll < 0.7
                        else str(rng.choice(VALUES))
                    )
                    chosen[order] = choice
                    gap = float(rng.normal(1.0 if choice == "A" else -1.0 if choice == "B" else 0))
                    s.add(
                        Judgment(
                            instance_id=inst.id,
                            detector_id=judges[name],
                            order=order,
                            choice=choice,
                            verdict_logits={"A": gap, "B": 0.0},
                            details={},
                        )
                    )
                world.orders[name][inst.id] = chosen
            voters = [p for p in PEOPLE if rng.random() < 0.7]
            world.votes[inst.id] = {}
            for person in voters:
                value = truth if rng.random() < 0.8 else str(rng.choice(VALUES))
                world.votes[inst.id][person] = value
            if i % 13 == 5:
                world.adjudicated[inst.id] = None if i == 5 else truth
        s.flush()
        for person in PEOPLE:
            cast = {i: v[person] for i, v in world.votes.items() if person in v}
            append_labels(s, LABEL, cast, source="vote", author=person)
        # Adjudications come after the votes, as a reviewer's decision does.
        for iid, value in world.adjudicated.items():
            append_label(s, iid, LABEL, value, source="adjudication", author="rita")
        recompute_flips(s, bench.id)
    return world


def _resolved(world: World, k: int) -> dict[int, str]:
    """The resolution rule by hand: adjudication, else k unanimous votes (no originals here)."""
    out = {}
    for iid in world.ids:
        if iid in world.adjudicated:
            value = world.adjudicated[iid]
        else:
            votes = set(world.votes[iid].values())
            value = votes.pop() if len(world.votes[iid]) >= k and len(votes) == 1 else None
        if value is not None:
            out[iid] = value
    return out


def _folded(orders: dict[str, str]) -> str | None:
    choices = list(orders.values())
    if "invalid" in choices:
        return None
    return choices[0] if len(set(choices)) == 1 else "tie"


@pytest.fixture
def world(factory: sessionmaker[Session]) -> World:
    return _build(factory)


def _check_against_sklearn(factory: sessionmaker[Session], world: World, k: int) -> None:
    people = _resolved(world, k)
    with factory() as s:
        bench = s.scalar(select(Benchmark).where(Benchmark.name == BENCH))
        assert bench is not None
        result = judges_vs_people(s, bench, LABEL, k=k, resamples=300, seed=3)
        two_id = s.scalar(select(Detector.id).where(Detector.name == TWO))
        q = select(Score.instance_id, Score.score).where(Score.detector_id == two_id)
        scores = {iid: score for iid, score in s.execute(q)}
    assert result.items == len(people)
    rows = {r.judge: r for r in result.judges}
    assert set(rows) == {TWO, ONE}
    for name in (TWO, ONE):
        verdicts = {i: v for i, o in world.orders[name].items() if (v := _folded(o)) is not None}
        shared = [i for i in world.ids if i in verdicts and i in people]
        judge, ppl = [verdicts[i] for i in shared], [people[i] for i in shared]
        row = rows[name]
        assert row.n_items == len(shared) > 20
        assert row.n_agree == sum(a == b for a, b in zip(judge, ppl, strict=True))
        assert row.kappa == pytest.approx(cohen_kappa_score(judge, ppl), abs=1e-12)
        assert row.confusion == confusion_matrix(judge, ppl, labels=VALUES).tolist()
        assert row.kappa_ci is not None and -1 <= row.kappa_ci[0] < row.kappa_ci[1] <= 1
    # The two-order judge's score is P(A is better): AUROC of people's A against people's B.
    ranked = [i for i in world.ids if people.get(i) in ("A", "B") and i in scores]
    y = [people[i] == "A" for i in ranked]
    two = rows[TWO]
    assert two.auroc_n == len(ranked)
    assert two.auroc == pytest.approx(roc_auc_score(y, [scores[i] for i in ranked]), abs=1e-12)
    assert two.auroc_ci is not None and two.auroc_ci[0] < two.auroc < two.auroc_ci[1]
    # The AB-only judge has no score: no AUROC, and the section says why.
    assert rows[ONE].auroc is None and rows[ONE].auroc_reason


def test_kappa_confusion_and_auroc_equal_sklearn(
    factory: sessionmaker[Session], world: World
) -> None:
    for k in (1, 2):  # a single vote resolves, or two agreeing ones must
        _check_against_sklearn(factory, world, k)


def test_judge_sources_list_flips_and_splits_with_people(
    factory: sessionmaker[Session], world: World
) -> None:
    assert {"filter", "disagreements", "judge-flips", "judge-people"} <= set(SOURCES)
    flips = sorted(
        (world.ext[i], i)
        for i, o in world.orders[TWO].items()
        if "invalid" not in o.values() and o["AB"] != o["BA"]
    )
    people = _resolved(world, 1)
    split = sorted(
        (world.ext[i], i)
        for i, o in world.orders[TWO].items()
        if (v := _folded(o)) is not None and i in people and v != people[i]
    )
    assert len(flips) > 5 and len(split) > 5
    with factory() as s:
        bench = s.scalar(select(Benchmark).where(Benchmark.name == BENCH))
        assert bench is not None
        found = source_items(s, bench, "judge-flips", f"judge={TWO}", 1000)
        assert (found.matching, found.ids) == (len(flips), [i for _, i in flips])
        query = f"judge={TWO}&label={LABEL}&k=1"
        found = source_items(s, bench, "judge-people", query, 1000)
        assert (found.matching, found.ids) == (len(split), [i for _, i in split])
        capped = source_items(s, bench, "judge-people", query, 4)
        assert (capped.matching, capped.ids) == (len(split), [i for _, i in split[:4]])
        for source, bad, message in (
            ("judge-flips", "", f"name the judge: judge=NAME ({ONE}, {TWO})"),
            ("judge-flips", "judge=nobody", f"no judge 'nobody' judged {BENCH}; judges: {ONE}, {TWO}"),  # noqa: E501
            ("judge-flips", f"judge={TWO}&label=x", "unknown parameter(s) label; this source takes judge"),  # noqa: E501
            ("judge-people", f"judge={TWO}&k=0", "k must be a whole number >= 1, got '0'"),
        ):  # fmt: skip
            with pytest.raises(InvalidInput) as info:
                source_items(s, bench, source, bad, 10)
            assert (info.value.field, info.value.reason) == ("query", message)


def test_a_queue_of_splits_shows_the_judge_disagreeing_on_every_item(
    factory: sessionmaker[Session], world: World
) -> None:
    with transaction(factory) as s:
        rita = create_user(s, "rita", "reviewer")
        new = NewQueue(
            BENCH, "splits", LABEL, "judge-people", f"judge={TWO}&label={LABEL}&k=1", overlap_k=1
        )
        queue = create_queue_from_source(s, new, "rita")
        # A vote-only label set offers the values its votes hold.
        assert list(queue.choices) == VALUES
        principal = Principal(rita.id, "rita", Role.reviewer, token_id=0)
        items = queues.item_ids(s, queue)
        view = queue_people_view(s, queue.id, principal, resamples=0)
        ann = create_user(s, "ann2", "annotator")
        with pytest.raises(queues.NotAssigned):
            queue_people_view(
                s, queue.id, Principal(ann.id, "ann2", Role.annotator, token_id=0), resamples=0
            )
        bench = s.get_one(Benchmark, queue.benchmark_id)
        whole = people_view(s, bench, None, k=1, resamples=0)
    assert view.result is not None and view.label == LABEL and view.k == 1
    two = next(r for r in view.result.judges if r.judge == TWO)
    assert (two.n_items, two.n_agree) == (len(items), 0)
    assert view.result.items == len(items)
    # On the whole benchmark the default label set is the one with votes.
    assert whole.label == LABEL and whole.result is not None
    assert whole.result.items == len(_resolved(world, 1))
