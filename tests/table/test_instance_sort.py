"""Sorting the instance table (API, page headers, neighbours) on both dialects.

The API's order is checked against a direct SQL query of the same order, ids in natural order
(``x:2`` before ``x:10``) and nulls last both ways.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.natural_sort import natural_key
from app.services.evidence.labels import append_label
from app.services.table.instance_sort import TableSort
from app.settings import Settings
from app.tables import Benchmark, Detector, Instance, Judgment, Score
from tests.support import factories as f
from tests.support.auth_support import api_client

BENCH = "sorted-mini"
RM = "reward_model/rm-one"
JUDGE = "judge/one"
N = 60


def _score(i: int) -> float | None:
    # Ties (i % 7) and missing scores (every fifth item) test the id tie-break and nulls last.
    return None if i % 5 == 0 else float(i % 7) / 7.0


def _seed(factory: sessionmaker[Session]) -> None:
    order = list(range(1, N + 1))
    random.Random(3).shuffle(order)  # insertion order differs from every sort order
    with transaction(factory) as session:
        bench = Benchmark(name=BENCH, kind="pairwise", description="", data_version=1)
        rm = Detector(name=RM, kind="reward_model", details={})
        judge = Detector(name=JUDGE, kind="judge", details={})
        session.add_all([bench, rm, judge])
        session.flush()
        for i in order:
            inst = Instance(
                benchmark_id=bench.id,
                external_id=f"x:{i}",
                group_key=f"g{i % 4}",
                payload={"prompt": f"p{i}", "response_a": "a", "response_b": "b"},
            )
            session.add(inst)
            session.flush()
            if (score := _score(i)) is not None:
                session.add(Score(detector_id=rm.id, instance_id=inst.id, score=score, details={}))
            if i % 3:
                append_label(session, inst.id, "reference", "AB"[i % 2], source="import")
            for order_name in ("AB", "BA"):
                session.add(
                    Judgment(
                        instance_id=inst.id,
                        detector_id=judge.id,
                        order=order_name,
                        raw_output="",
                        choice="A",
                        confidence=None if i % 4 == 0 else float(i % 9) * 10,
                        mode="imported",
                        details={},
                    )
                )


@pytest.fixture
def client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    _seed(factory)
    with api_client(settings) as c:
        yield c


def _api_ids(client: TestClient, sort: str, **params: Any) -> list[str]:
    r = client.get(f"/api/benchmarks/{BENCH}/instances", params={"sort": sort, **params})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["sort"] == (sort.strip() or "external_id")
    return [item["external_id"] for item in body["items"]]


# The same orders written by hand in SQL: the key, then the instance id; nulls last.
_SQL = {
    "-score:" + RM: """
        SELECT i.external_id FROM instances i
        JOIN benchmarks b ON b.id = i.benchmark_id
        LEFT JOIN scores s ON s.instance_id = i.id
          AND s.detector_id = (SELECT id FROM detectors WHERE name = :rm)
        WHERE b.name = :bench
        ORDER BY s.score IS NULL, s.score DESC, i.id LIMIT 20""",
    "score:" + RM: """
        SELECT i.external_id FROM instances i
        JOIN benchmarks b ON b.id = i.benchmark_id
        LEFT JOIN scores s ON s.instance_id = i.id
          AND s.detector_id = (SELECT id FROM detectors WHERE name = :rm)
        WHERE b.name = :bench
        ORDER BY s.score IS NULL, s.score, i.id LIMIT 20""",
    "-label:reference": """
        SELECT i.external_id FROM instances i
        JOIN benchmarks b ON b.id = i.benchmark_id
        LEFT JOIN label_events e ON e.instance_id = i.id AND e.label_name = 'reference'
        WHERE b.name = :bench
        ORDER BY e.value IS NULL, e.value DESC, i.id LIMIT 20""",
}


@pytest.mark.parametrize("sort", sorted(_SQL))
def test_api_order_matches_a_direct_sql_query(
    client: TestClient, factory: sessionmaker[Session], sort: str
) -> None:
    with factory() as session:
        expected = list(session.scalars(text(_SQL[sort]), {"bench": BENCH, "rm": RM}))
    got = _api_ids(client, sort, page_size=20)
    assert got == expected
    assert len(got) == 20


def test_highest_scores_first_ties_by_id_nulls_last(client: TestClient) -> None:
    every = _api_ids(client, "-score:" + RM, page_size=N)
    scores = [_score(int(x.split(":")[1])) for x in every]
    known = [s for s in scores if s is not None]
    assert known == sorted(known, reverse=True)
    assert scores[len(known) :] == [None] * (N - len(known)), "missing scores come last"
    # Ascending: still last.
    rising = [_score(int(x.split(":")[1])) for x in _api_ids(client, "score:" + RM, page_size=N)]
    assert rising[-1] is None and rising[0] == 0.0
    # Pages continue the same order without gaps or repeats.
    paged = [x for p in (1, 2, 3) for x in _api_ids(client, "-score:" + RM, page_size=20, page=p)]
    assert paged == every


def test_external_ids_in_natural_order(client: TestClient) -> None:
    got = _api_ids(client, "", page_size=N)
    assert got == [f"x:{i}" for i in range(1, N + 1)]
    assert _api_ids(client, "-external_id", page_size=3) == ["x:60", "x:59", "x:58"]


def test_judge_confidence_sort(client: TestClient) -> None:
    got = _api_ids(client, "-confidence:" + JUDGE, page_size=N)
    conf = [None if i % 4 == 0 else (i % 9) * 10 for i in (int(x[2:]) for x in got)]
    known = [c for c in conf if c is not None]
    assert known == sorted(known, reverse=True) and conf[len(known) :] == [None] * (N - len(known))


@pytest.mark.parametrize(
    ("sort", "message"),
    [
        ("bogus", "unknown sort field 'bogus'"),
        ("score", "needs a name"),
        ("score:nobody", "no scored detector 'nobody'"),
        ("label:nothing", "no label set 'nothing'"),
        ("external_id:x", "takes no ':' name"),
    ],
)
def test_bad_sort_is_refused_with_its_reason(client: TestClient, sort: str, message: str) -> None:
    r = client.get(f"/api/benchmarks/{BENCH}/instances", params={"sort": sort})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert message in detail["msg"] and detail["loc"][-1] == "sort"


def test_headers_link_to_the_same_sorts_and_neighbours_follow(client: TestClient) -> None:
    page = client.get(f"/benchmarks/{BENCH}", params={"sort": "-score:" + RM}).text
    # The sorted column links to the other direction; other score-like columns start high.
    assert f'href="/benchmarks/{BENCH}?sort=score%3A{RM.replace("/", "%2F")}"' in page
    assert 'aria-sort="descending"' in page
    assert f'href="/benchmarks/{BENCH}?sort=-external_id"' not in page
    assert f'href="/benchmarks/{BENCH}?sort=label%3Areference"' in page
    first = _api_ids(client, "-score:" + RM, page_size=3)
    # Row links carry the order, so the instance page's previous/next follow it.
    assert "sort=-score%3A" in page
    r = client.get(f"/api/benchmarks/{BENCH}/instances/{first[1]}", params={"sort": "-score:" + RM})
    assert r.json()["neighbours"] == {"previous": first[0], "next": first[2]}
    assert r.json()["sort"] == "-score:" + RM
    # At the end of the order: the nulls, by id.
    every = _api_ids(client, "-score:" + RM, page_size=N)
    last = client.get(
        f"/api/benchmarks/{BENCH}/instances/{every[-1]}", params={"sort": "-score:" + RM}
    ).json()
    assert last["neighbours"] == {"previous": every[-2], "next": None}
    crossing = client.get(
        f"/api/benchmarks/{BENCH}/instances/{every[-13]}", params={"sort": "-score:" + RM}
    ).json()
    assert crossing["neighbours"] == {"previous": every[-14], "next": every[-12]}


def test_seeded_table_keeps_working_in_natural_order(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    f.seed_benchmarks(factory)
    with api_client(settings) as c:
        body = c.get("/api/benchmarks/jb-mini/instances").json()
    got = [item["external_id"] for item in body["items"]]
    assert got == sorted(got, key=natural_key)


def test_sort_round_trip() -> None:
    for text_ in ("external_id", "-group", "score:a/b:c", "-label:reference", "confidence:j"):
        assert str(TableSort.parse(text_)) == text_
    assert TableSort.parse("").is_default and TableSort.parse(None).param is None
    assert TableSort.parse("score:x").toggled("score:x") == "-score:x"
    assert TableSort.parse("-score:x").toggled("score:x") == "score:x"
    assert TableSort().toggled("score:y") == "-score:y"
    assert TableSort().toggled("external_id") == "-external_id"


def test_natural_key() -> None:
    ids = ["x:100", "x:10", "x:2", "x:1", "x:", "y:0", "x:a", "x:02"]
    assert sorted(ids, key=natural_key) == [
        "x:",
        "x:1",
        "x:2",
        "x:02",
        "x:10",
        "x:100",
        "x:a",
        "y:0",
    ]
    assert natural_key("a" + "9" * 150) > natural_key("a" + "9" * 149)
