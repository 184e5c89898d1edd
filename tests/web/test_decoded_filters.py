"""Filters are checked where they are decoded: non-finite bounds and decoded NULs are 422s.

Score bounds are finite numbers: nan, inf and 1e309 are a 422 naming the bound, everywhere.

The table page answered 500 on them, the API 200, and a queue could be created from such a
filter (issue 21 item 15).
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.main import create_app
from app.settings import Settings
from app.tables import ReviewQueue
from tests.support import factories as f
from tests.support.auth_support import api_client, browser_session

BAD = ["nan", "inf", "-inf", "1e309", "NaN", "-Infinity"]


def test_a_non_finite_bound_is_refused_on_the_page_the_api_and_a_new_queue(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    f.seed_benchmarks(factory)
    cases = [(bound, value) for bound in ("score_min", "score_max") for value in BAD]
    page, api = f"/benchmarks/{f.PAIRWISE}", f"/api/benchmarks/{f.PAIRWISE}/instances"
    wrong = []
    with api_client(settings, "admin", raise_server_exceptions=False) as client:
        for bound, value in cases:
            query = urlencode({"score_detector": f.RM_1, bound: value})
            for url in (f"{page}?{query}", f"{api}?{query}"):
                got = client.get(url)
                if got.status_code != 422 or bound not in got.text:
                    wrong.append(f"GET {url}: {got.status_code}")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        csrf = browser_session(client, settings, "rita", "reviewer")
        for bound, value in cases:
            data = {
                "csrf_token": csrf, "benchmark": f.PAIRWISE, "name": "q", "label": "reference",
                "source": "filter", "overlap_k": "1",
                "query": urlencode({"score_detector": f.RM_1, bound: value}),
            }  # fmt: skip
            made = client.post("/queues", data=data, follow_redirects=False)
            if made.status_code != 422 or bound not in made.text:
                wrong.append(f"POST /queues {bound}={value}: {made.status_code}")
    assert not wrong, "\n".join(wrong)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(ReviewQueue)) == 0


def test_finite_bounds_still_filter(settings: Settings, factory: sessionmaker[Session]) -> None:
    f.seed_benchmarks(factory)
    with api_client(settings) as client:
        got = client.get(
            f"/api/benchmarks/{f.PAIRWISE}/instances",
            params={"score_detector": f.RM_1, "score_min": "0", "score_max": "1e300"},
        )
        assert got.status_code == 200 and got.json()["total"] >= 1


def test_a_nul_decoded_from_a_filter_parameter_is_refused(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    """Issue 21 item 14: a NUL decoded from a filter passed as a parameter is a 422.

    ``%2500`` decodes to NUL only when the filter itself is parsed; PostgreSQL answered 500 on
    it (export, changelog, new queue).
    """
    f.seed_benchmarks(factory)
    inner = "q=a%00b"  # a filter whose own decoding gives a NUL
    wrong = []
    with api_client(settings, "admin", raise_server_exceptions=False) as client:
        for path in ("export", "export/changelog.csv"):
            url = f"/benchmarks/{f.PAIRWISE}/{path}"
            got = client.get(url, params={"format": "csv", "filter": inner})
            if got.status_code != 422 or "NUL" not in got.text:
                wrong.append(f"GET {url}: {got.status_code} {got.text[:120]!r}")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        csrf = browser_session(client, settings, "rita", "reviewer")
        for source, query in (("filter", inner), ("disagreements", f"mode=threshold&{inner}")):
            data = {
                "csrf_token": csrf, "benchmark": f.PAIRWISE, "name": "q", "label": "reference",
                "source": source, "overlap_k": "1", "query": query,
            }  # fmt: skip
            made = client.post("/queues", data=data, follow_redirects=False)
            if made.status_code != 422 or "NUL" not in made.text:
                wrong.append(f"POST /queues {source}: {made.status_code} {made.text[:120]!r}")
    assert not wrong, "\n".join(wrong)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(ReviewQueue)) == 0
