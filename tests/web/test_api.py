"""JSON API on both dialects: benchmarks, facets, filtered instance lists, instances, errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.labels import append_label
from app.services.table import browse
from app.settings import Settings
from app.tables import Instance
from tests.support import factories as f
from tests.support.auth_support import api_client

ALL = {p.external_id for p in f.PAIRS}


@pytest.fixture
def client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    f.seed_benchmarks(factory)
    with api_client(settings) as c:
        yield c


def ids(body: dict[str, Any]) -> set[str]:
    return {item["external_id"] for item in body["items"]}


def test_list_benchmarks(client: TestClient) -> None:
    body = client.get("/api/benchmarks").json()
    assert [b["name"] for b in body] == ["jb-mini", "lies-mini", "truth-mini"]
    jb = body[0]
    assert (jb["kind"], jb["instances"], jb["groups"], jb["label_sets"]) == ("pairwise", 6, 3, 2)
    # Judges: detectors that judged both orders (JUDGE_2 has only an AB call).
    assert (jb["judges"], jb["scored_detectors"], jb["judgments"]) == (1, 2, 11)


def test_benchmark_facets(client: TestClient) -> None:
    body = client.get("/api/benchmarks/jb-mini").json()
    assert body["summary"]["name"] == "jb-mini"
    labels = {s["name"]: {v["value"]: v["count"] for v in s["values"]} for s in body["label_sets"]}
    # Current values: pair-004 was relabelled A -> B.
    assert labels["reference"] == {"A": 3, "B": 3, None: 0}
    assert labels[f.FLIP] == {"0": 2, "1": 2, None: 2}
    judges = body["judges"]
    assert [j["name"] for j in judges] == [f.JUDGE, f.JUDGE_2]
    assert judges[0]["orders"] == {"AB": 5, "BA": 5, "AB-repeat": 0}
    assert judges[0]["flip_label"] == f.FLIP and judges[1]["flip_label"] is None
    assert "id" not in judges[0]
    rm1 = next(d for d in body["scored_detectors"] if d["name"] == f.RM_1)
    assert (rm1["count"], rm1["min"], rm1["max"]) == (5, -2.0, 2.5)
    source, model = body["slices"]
    assert (source["field"], model["field"]) == ("source", "response_model")
    assert model["values"] == [{"value": "gpt-4o-2024-05-13", "count": 6}]
    assert {v["value"]: v["count"] for v in source["values"]} == {
        "livebench-math": 2,
        "livecodebench": 1,
        "mmlu-pro-law": 3,
    }


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ALL),
        ("label=reference%3DA", {"pair/001:a|b", "pair-003-xss", "q?x#y%z"}),
        ("label=reference%3DB", {"pair/002", "pair-004", "pair-005"}),
        (f"label={quote(f.FLIP)}%3D", {"pair-003-xss", "q?x#y%z"}),
        ("flip=yes", {"pair/002", "pair-005"}),
        ("flip=no", {"pair/001:a|b", "pair-004"}),
        ("flip=none", {"pair-003-xss", "q?x#y%z"}),
        ("ab=A", {"pair/001:a|b", "pair/002"}),
        ("ab=tie", {"pair-005"}),
        ("ba=invalid", {"pair-003-xss"}),
        ("ab=B&ba=B", {"pair-004"}),
        (f"judge={quote(f.JUDGE_2)}&ab=B", {"pair/001:a|b"}),
        (f"judge={quote(f.JUDGE_2)}&flip=yes", set()),
        ("slice=source%3Dmmlu-pro-law", {"pair/001:a|b", "pair-004", "q?x#y%z"}),
        ("slice=source%3Dnowhere", set()),
        ("score_min=0", {"pair/001:a|b", "pair-003-xss", "pair-004"}),
        (f"score_detector={quote(f.RM_1)}&score_min=0&score_max=1", {"pair-003-xss"}),
        (f"score_detector={quote(f.RM_2)}&score_max=0", {"pair/001:a|b", "pair-005"}),
        (f"score_detector={quote(f.RM_2)}&score_min=-0.25&score_max=-0.25", {"pair/001:a|b"}),
        ("q=zebra", {"pair-005"}),
        ("q=ZEBRA", {"pair-005"}),
        ("q=caf%C3%A9%20cr%C3%A8me", {"pair-005"}),
        ("q=pair%2F00", {"pair/001:a|b", "pair/002"}),
        ("q=mmlu-pro", {"pair/001:a|b", "pair-004", "q?x#y%z"}),
        ("q=%22here%22", {"pair-003-xss"}),
        ("q=%3Cscript%3E", {"pair-003-xss"}),
        ("q=%0A%0A%20%20%20%20indented", {"pair-003-xss"}),
        # Key names and LIKE wildcards match nothing by themselves.
        ("q=response_model", set()),
        ("q=_", set()),
        ("q=%25", {"q?x#y%z"}),
        ("slice=source%3Dmmlu-pro-law&flip=no&label=reference%3DB", {"pair-004"}),
        ("label=reference%3DA&label=reference%3DB", set()),
    ],
)
def test_filters_select_exactly_the_matching_rows(
    client: TestClient, query: str, expected: set[str]
) -> None:
    r = client.get(f"/api/benchmarks/jb-mini/instances?{query}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert ids(body) == expected
    assert body["total"] == len(expected)


def test_rows_carry_labels_judges_and_scores(client: TestClient) -> None:
    body = client.get("/api/benchmarks/jb-mini/instances?q=pair%2F002").json()
    (row,) = body["items"]
    assert row["group_key"] == "q-livebench-math"
    assert row["slices"] == {"source": "livebench-math", "response_model": "gpt-4o-2024-05-13"}
    assert row["labels"] == {"reference": "B", f.FLIP: "1"}
    assert row["judges"][f.JUDGE] == {
        "ab": "A",
        "ba": "B",
        "ab_confidence": 80.0,
        "ba_confidence": 80.0,
        "flip": "1",
    }
    assert row["judges"][f.JUDGE_2]["ab"] is None
    assert row["scores"] == {f.RM_1: -1.0, f.RM_2: 0.75}
    assert row["preview"] == "Which answer is right?"


def test_pages_are_ordered_and_disjoint(client: TestClient) -> None:
    seen: list[str] = []
    for page in (1, 2, 3):
        body = client.get(f"/api/benchmarks/jb-mini/instances?page_size=2&page={page}").json()
        assert (body["page"], body["page_size"], body["total"], body["pages"]) == (page, 2, 6, 3)
        seen += [item["external_id"] for item in body["items"]]
    assert set(seen) == ALL and len(seen) == 6
    assert seen == sorted(seen)
    empty = client.get("/api/benchmarks/jb-mini/instances?page_size=2&page=4").json()
    assert empty["items"] == [] and empty["total"] == 6


def _page_ids(client: TestClient, query: str, size: int, pages: int = 7) -> list[list[str]]:
    out = []
    for page in range(1, pages + 1):
        url = f"/api/benchmarks/jb-mini/instances?{query}&page_size={size}&page={page}"
        out.append([item["external_id"] for item in client.get(url).json()["items"]])
    return out


@pytest.mark.parametrize("query", ["", "flip=no", "label=reference%3DB", "q=pair", "ab=A"])
def test_deep_pages_seek_to_the_same_rows_as_offset(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    by_offset = {size: _page_ids(client, query, size) for size in (1, 2, 4)}
    # Every page counts as deep: it starts from the cached first key of each page.
    monkeypatch.setattr(browse, "DEEP_OFFSET", 0)
    for size, pages in by_offset.items():
        assert _page_ids(client, query, size) == pages


def test_deep_pages_follow_data_version(
    client: TestClient, factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(browse, "DEEP_OFFSET", 0)
    before = _page_ids(client, "label=reference%3DB", 1, pages=3)
    assert sorted(k for (k,) in before) == sorted(["pair/002", "pair-004", "pair-005"])
    with transaction(factory) as session:
        inst = session.query(Instance).filter_by(external_id="pair-004").one()
        append_label(session, inst.id, "reference", "A", source="reviewer")
    f.bump_version(factory, "jb-mini")
    after = _page_ids(client, "label=reference%3DB", 1, pages=3)
    assert after == [page for page in before if page != ["pair-004"]] + [[]]


def test_canonical_filter_is_echoed(client: TestClient) -> None:
    body = client.get(
        "/api/benchmarks/jb-mini/instances?flip=yes&label=reference%3DB&label=reference%3DB"
        "&score_detector=" + quote(f.RM_2)
    ).json()
    assert body["filter"]["judge"] == f.JUDGE
    assert body["filter"]["labels"] == [{"name": "reference", "value": "B"}]
    # A detector without a range is not a condition.
    assert body["filter"]["score_detector"] is None


def test_instance_detail(client: TestClient) -> None:
    r = client.get("/api/benchmarks/jb-mini/instances/pair-004?label=reference%3DB")
    assert r.status_code == 200
    body = r.json()
    assert body["external_id"] == "pair-004" and body["kind"] == "pairwise"
    assert body["payload"]["source"] == "mmlu-pro-law"
    reference = next(s for s in body["labels"] if s["name"] == "reference")
    assert reference["current"] == "B"
    assert [(e["value"], e["source"]) for e in reference["events"]] == [
        ("A", "import"),
        ("B", "reviewer"),
    ]
    (judge,) = body["judges"]
    assert judge["name"] == f.JUDGE and judge["flip"] == "0"
    assert [(j["order"], j["choice"]) for j in judge["judgments"]] == [("AB", "B"), ("BA", "B")]
    assert judge["judgments"][0]["verdict_logits"] == {"A": 1.25, "B": -0.5}
    assert {s["detector"]: s["score"] for s in body["scores"]} == {f.RM_1: 1.5, f.RM_2: 0.1}
    assert body["neighbours"] == {"previous": None, "next": "pair-005"}


def test_instance_with_slashes_in_its_id(client: TestClient) -> None:
    path = "/api/benchmarks/jb-mini/instances/" + quote("pair/001:a|b", safe="")
    body = client.get(path).json()
    assert body["external_id"] == "pair/001:a|b"
    assert {j["name"] for j in body["judges"]} == {f.JUDGE, f.JUDGE_2}
    weird = client.get("/api/benchmarks/jb-mini/instances/" + quote("q?x#y%z", safe=""))
    assert weird.json()["external_id"] == "q?x#y%z"


def test_statement_benchmark_filters(client: TestClient) -> None:
    body = client.get(
        f"/api/benchmarks/truth-mini/instances?score_detector={quote(f.PROBE)}&score_min=0.5"
    ).json()
    assert ids(body) == {"cities-0001", "sp-en-0001", "sp-en-0002"}
    body = client.get("/api/benchmarks/truth-mini/instances?slice=source%3Dcities&label=truth%3D0")
    assert ids(body.json()) == {"cities-0002"}
    detail = client.get("/api/benchmarks/lies-mini/instances/flat-earth%2F001").json()
    assert detail["payload"]["persona"] == "flat-earther"


@pytest.mark.parametrize(
    "path",
    [
        "/api/benchmarks/nope",
        "/api/benchmarks/nope/instances",
        "/api/benchmarks/jb-mini/instances/nope",
        "/api/benchmarks/truth-mini/instances/pair-004",
    ],
)
def test_not_found_is_json_404(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/json"
    assert "no " in r.json()["detail"]


@pytest.mark.parametrize(
    ("query", "loc", "message"),
    [
        ("label=nolabel%3D1", ["query", "label"], "unknown label set 'nolabel'"),
        ("label=reference", ["query", "label"], "expected NAME=VALUE"),
        ("score_min=3&score_max=1", ["query", "score_min"], "greater than score_max"),
        ("ab=maybe", ["query", "ab"], "Input should be"),
        ("flip=perhaps", ["query", "flip"], "Input should be"),
        ("score_max=lots", ["query", "score_max"], "valid number"),
        ("page_size=501", ["query", "page_size"], "less than or equal to 500"),
        ("score_detector=nobody", ["query", "score_detector"], "no scored detector 'nobody'"),
        ("q=" + "x" * 201, ["query", "q"], "at most 200 characters"),
    ],
)
def test_bad_filters_are_422_with_a_clear_message(
    client: TestClient, query: str, loc: list[str], message: str
) -> None:
    r = client.get(f"/api/benchmarks/jb-mini/instances?{query}")
    assert r.status_code == 422
    (err,) = r.json()["detail"]
    assert err["loc"] == loc
    assert message in err["msg"]


def test_healthz(client: TestClient, dialect: str) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "database": dialect}


def test_openapi_documents_the_filters(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    assert set(paths) >= {
        "/api/benchmarks",
        "/api/benchmarks/{name}",
        "/api/benchmarks/{name}/instances",
        "/api/benchmarks/{name}/instances/{external_id}",
        "/healthz",
    }
    params = {p["name"] for p in paths["/api/benchmarks/{name}/instances"]["get"]["parameters"]}
    assert params >= {
        "q",
        "label",
        "slice",
        "judge",
        "ab",
        "ba",
        "flip",
        "score_detector",
        "score_min",
        "score_max",
        "page",
        "page_size",
    }
    ok = paths["/api/benchmarks/{name}/instances"]["get"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/InstancePage")
    # HTML pages stay out of the API description.
    assert "/benchmarks/{name}" not in paths
    assert client.get("/docs").status_code == 200
