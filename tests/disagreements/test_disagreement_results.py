"""Kept disagreement lists: equal to the direct computation, reused, ranked again after a write.

The direct computation here is the finder as it ran before lists were kept: the mode finds
every item, ranks them, and the page's rows get their previews.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.accounts.users import Principal, create_user
from app.services.disagreements import disagreement_results
from app.services.disagreements.disagreement_query import DisagreementQuery, build_query
from app.services.disagreements.disagreement_results import (
    DISAGREEMENT_CACHE,
    ListRequest,
    RankedList,
    rank_directly,
)
from app.services.disagreements.lists import MODES, find_disagreements
from app.services.disagreements.modes import get_mode
from app.services.disagreements.modes.base import Disagreement
from app.services.disagreements.modes.previews import with_previews
from app.services.evidence.benchmarks import bump_data_version, get_benchmark
from app.services.evidence.labels import append_label
from app.services.evidence.scores import benchmark_scores, replace_scores
from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers
from app.services.metrics.report import get_detector
from app.services.review import queues
from app.tables import DisagreementResult, ReviewQueue, Role
from tests.conftest import DATA
from tests.disagreements.test_disagreements_judge import client, loaded
from tests.ingest.test_helpers import O1_MINI_JUDGE

__all__ = ["client", "loaded"]  # shared fixtures: JudgeBench GPT-4o pairs, o1-mini, 3 RMs

REWARD = "reward_model/Skywork_Skywork-Reward-Gemma-2-27B"
REWARD_2 = "reward_model/Skywork_Skywork-Reward-Llama-3.1-8B"
MMLU = [DATA / "mmlu-redux" / f"{s}.csv" for s in ("astronomy", "world_religions")]

# (benchmark, query): every registered mode, with parameters off default.
THRESHOLD = build_query("threshold", [REWARD], values={"min_confidence": 0.6})
CASES = [
    ("judgebench", THRESHOLD),
    ("judgebench", build_query("cleanlab", [REWARD])),
    (
        "judgebench",
        build_query("consensus", [REWARD, REWARD_2], values={"min_confidence": 0.6, "k": 1}),
    ),
    ("judgebench", build_query("judge-orders", [O1_MINI_JUDGE])),
    (
        "judgebench",
        build_query(
            "detector-vs-judge", [REWARD], values={"judge": O1_MINI_JUDGE, "min_confidence": 0.6}
        ),
    ),
    ("judgebench", build_query("margin", [REWARD], values={"band": 0.2})),
    ("mmlu", build_query("label-errors", ["ranker:consensus"])),
]


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    DISAGREEMENT_CACHE.clear()
    yield
    DISAGREEMENT_CACHE.clear()


def seed_mmlu(factory: sessionmaker[Session]) -> None:
    """Two MMLU-Redux subjects with the consensus label-error ranker."""
    with transaction(factory) as session:
        import_mmlu_redux(session, MMLU, "mmlu")
    with transaction(factory) as session:
        inputs = rank_inputs(session, "mmlu")
    with transaction(factory) as session:
        store_rankers(session, inputs, compute_rankers(inputs, ["consensus"]))


@pytest.fixture
def computations(monkeypatch: pytest.MonkeyPatch) -> list[ListRequest]:
    """Every request :func:`disagreement_results.compute_ranked` ranks, in order."""
    calls: list[ListRequest] = []
    compute = disagreement_results.compute_ranked

    def counting(session: Session, bench: Any, request: ListRequest) -> RankedList:
        calls.append(request)
        return compute(session, bench, request)

    monkeypatch.setattr(disagreement_results, "compute_ranked", counting)
    return calls


def direct(
    session: Session, benchmark: str, query: DisagreementQuery
) -> tuple[list[Disagreement], str | None]:
    """The whole ranked list and the positive class, as the finder computed them per request."""
    spec = get_mode(query.mode)
    names = list(query.detectors)
    request = ListRequest.of(
        spec, names, query.label or "reference", query.positive, spec.settle(names, query.values)
    )
    return rank_directly(session, get_benchmark(session, benchmark), request)


def _shown(items: list[Disagreement]) -> list[tuple[Disagreement, str, dict[str, str]]]:
    # Disagreement equality leaves previews and slices out: compare them too.
    return [(d, d.preview, d.slices) for d in items]


def test_every_mode_is_covered() -> None:
    assert {query.mode for _, query in CASES} == set(MODES)


@pytest.mark.parametrize(("benchmark", "query"), CASES, ids=[c[1].mode for c in CASES])
def test_kept_list_equals_direct_computation(
    loaded: sessionmaker[Session],
    benchmark: str,
    query: DisagreementQuery,
    computations: list[ListRequest],
) -> None:
    factory = loaded
    if benchmark == "mmlu":
        seed_mmlu(factory)
    with factory() as session:
        bench = get_benchmark(session, benchmark)
        want, positive = direct(session, benchmark, query)
        page = with_previews(session, bench, want[:7])
    assert len(want) > 7  # so that the limit cuts

    def check(session: Session) -> None:
        whole = find_disagreements(session, benchmark, query)
        assert whole.items == want and whole.total == len(want) and whole.positive == positive
        assert [d.as_dict() for d in whole.items] == [d.as_dict() for d in want]
        limited = find_disagreements(session, benchmark, query.with_limit(7))
        assert _shown(limited.items) == _shown(page) and limited.total == len(want)

    with transaction(factory) as session:
        check(session)  # ranked here and stored
        check(session)  # from this process's cache
    assert len(computations) == 1
    DISAGREEMENT_CACHE.clear()  # as another process, or after a restart: from the store
    with transaction(factory) as session:
        check(session)
        assert session.scalar(select(func.count()).select_from(DisagreementResult)) == 1
    assert len(computations) == 1


def test_columns_round_trip_through_bytes() -> None:
    found = [
        Disagreement(3, "x\u00e9", None, None, 0.25, "a reason", evidence={"votes": {"A": 2}}),
        Disagreement(1, "\U0001f600 y", "B", 1e-300, None, "", evidence=None),
        Disagreement(2, "", "", float("inf"), 1.0 / 3.0, "r\u2028\x00s"),
    ]
    ranked = RankedList.of(found, "A")
    back = RankedList.from_bytes(ranked.to_bytes(), "A")
    assert back.rows() == found and back.rows(2) == found[:2] and back.positive == "A"
    assert RankedList.from_bytes(RankedList.of([], None).to_bytes(), None).rows() == []


def _ids(session: Session, query: DisagreementQuery) -> list[str]:
    return [d.external_id for d in find_disagreements(session, "judgebench", query).items]


def test_a_write_ranks_the_list_again(
    loaded: sessionmaker[Session], computations: list[ListRequest]
) -> None:
    query = THRESHOLD
    with transaction(loaded) as session:
        before = _ids(session, query)
        assert _ids(session, query) == before
    assert len(computations) == 1

    # New scores: the detector now gives the opposite probability everywhere.
    with transaction(loaded) as session:
        bench = get_benchmark(session, "judgebench")
        detector = get_detector(session, REWARD)
        rows = session.execute(benchmark_scores(detector.id, bench.id)).all()
        replace_scores(session, detector, bench, {iid: (1.0 - p, {}) for iid, p in rows})
    with transaction(loaded) as session:
        rescored = _ids(session, query)
        assert rescored == [d.external_id for d in direct(session, "judgebench", query)[0]]
        assert rescored != before
    assert len(computations) == 2

    # A relabelled item: its label set's value changes as an import changes it.
    with transaction(loaded) as session:
        first = find_disagreements(session, "judgebench", query).items[0]
        flipped = "B" if first.label == "A" else "A"
        append_label(session, first.instance_id, "reference", flipped, source="import")
        bump_data_version(session, get_benchmark(session, "judgebench"))
    with transaction(loaded) as session:
        relabelled = _ids(session, query)
        assert relabelled == [d.external_id for d in direct(session, "judgebench", query)[0]]
        assert first.external_id not in relabelled
        # Only the current data version's list is kept.
        versions = session.scalars(select(DisagreementResult.data_version)).all()
        assert versions == [get_benchmark(session, "judgebench").evidence_version]
    assert len(computations) == 3


def test_a_vote_keeps_the_list(
    loaded: sessionmaker[Session], computations: list[ListRequest]
) -> None:
    """Review events leave original labels alone: the kept list serves the next page."""
    with transaction(loaded) as session:
        bench = get_benchmark(session, "judgebench")
        before = find_disagreements(session, "judgebench", THRESHOLD).items
        user = create_user(session, "ann", Role.annotator.value)
        ann = Principal(user.id, user.name, Role.annotator, token_id=0)
        queue = queues.create_queue(
            session, bench, [d.instance_id for d in before[:2]], name="q", label_name="reference",
            source="filter", blind=False,
        )  # fmt: skip
        versions = (bench.data_version, bench.evidence_version)
    with transaction(loaded) as session:
        queue = session.get_one(ReviewQueue, queue.id)
        item = before[0].instance_id
        seen = queues.label_version(session, item, "reference")
        value = "B" if before[0].label == "A" else "A"
        queues.record(session, queue, item, ann, kind="vote", value=value, seen_version=seen)
    with transaction(loaded) as session:
        bench = get_benchmark(session, "judgebench")
        assert bench.data_version == versions[0] + 1  # facets and resolved labels see the vote
        assert bench.evidence_version == versions[1]
        assert _ids(session, THRESHOLD) == [d.external_id for d in before]
    assert len(computations) == 1


def test_a_warm_page_binds_only_its_own_ids(loaded: sessionmaker[Session], engine: Engine) -> None:
    """Every statement of a warm request binds a few parameters: the page's ids, not the list's.

    (PostgreSQL refuses a statement with more than 65,535 bound parameters.)
    """
    query = build_query("judge-orders", [O1_MINI_JUDGE], limit=3)
    bound: list[int] = []

    def count(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        bound.append(len(parameters))

    with loaded() as session:
        total = find_disagreements(session, "judgebench", query).total
        assert total > 100
        event.listen(engine, "before_cursor_execute", count)
        try:
            assert len(find_disagreements(session, "judgebench", query).items) == 3
        finally:
            event.remove(engine, "before_cursor_execute", count)
    assert bound and max(bound) <= 3 + 10


def test_pages_keep_the_list_for_other_processes(
    client: TestClient, loaded: sessionmaker[Session], computations: list[ListRequest]
) -> None:
    """Page, CSV and API rank once and store the list, then serve it from cache or store.

    (They store it in a write transaction of their own; cleared, the cache is as another
    process's.)
    """
    params = {"detector": REWARD, "mode": "threshold", "min_confidence": 0.6, "limit": 5}
    with loaded() as session:
        want = find_disagreements(session, "judgebench", THRESHOLD.with_limit(5)).as_dict()
    DISAGREEMENT_CACHE.clear()
    computations.clear()
    api = "/api/benchmarks/judgebench/disagreements"
    assert client.get(api, params=params).json() == want
    page = client.get("/benchmarks/judgebench/disagreements", params=params)
    csv_page = client.get("/benchmarks/judgebench/disagreements.csv", params=params)
    assert page.status_code == csv_page.status_code == 200
    assert want["items"][0]["external_id"] in page.text and len(csv_page.text.splitlines()) == 6
    assert len(computations) == 1
    DISAGREEMENT_CACHE.clear()
    with loaded() as session:
        assert session.scalar(select(func.count()).select_from(DisagreementResult)) == 1
    assert client.get(api, params=params).json() == want
    assert len(computations) == 1
