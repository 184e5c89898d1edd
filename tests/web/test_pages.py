"""HTML pages on both dialects: list, instance table (page and htmx fragment), instance pages."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.settings import Settings
from tests.support import factories as f
from tests.support.auth_support import api_client

HX = {"HX-Request": "true"}


@pytest.fixture
def client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    f.seed_benchmarks(factory)
    with api_client(settings) as c:
        yield c


def row_ids(html: str) -> set[str]:
    """External ids of the table rows (the first cell's link text)."""
    return {
        m.group(1).replace("&amp;", "&")
        for m in re.finditer(r'<td class="id"><a href="[^"]*">([^<]*)</a></td>', html)
    }


def instance_path(bench: str, external_id: str) -> str:
    return f"/benchmarks/{quote(bench, safe='')}/instances/{quote(external_id, safe='')}"


def test_index_lists_benchmarks_with_counts(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    row = re.search(r'<a href="/benchmarks/jb-mini">jb-mini</a>(.*?)</tr>', r.text, re.S)
    assert row is not None
    counts = re.findall(r'<td class="num">([\d,]+)</td>', row.group(1))
    # instances, groups, label sets, judges (both orders; JUDGE_2 has only AB), scored, judgments
    assert counts == ["6", "3", "2", "1", "2", "11"]
    assert f.STATEMENTS in r.text and f.RESPONSES in r.text
    # The description is data: its markup is shown, not interpreted.
    assert "<i>not italic</i>" not in r.text
    assert "&lt;i&gt;not italic&lt;/i&gt;" in r.text


def test_index_with_no_benchmarks(settings: Settings, factory: sessionmaker[Session]) -> None:
    with api_client(settings) as c:
        r = c.get("/")
    assert r.status_code == 200
    assert "No benchmarks yet" in r.text


def test_benchmark_page_full_and_fragment(client: TestClient) -> None:
    full = client.get("/benchmarks/jb-mini")
    assert full.status_code == 200
    assert full.text.lstrip().startswith("<!doctype html>")
    assert 'id="filters"' in full.text and 'id="results"' in full.text
    assert row_ids(full.text) == {p.external_id for p in f.PAIRS}
    assert "Content-Security-Policy" in full.headers
    assert full.headers["Vary"] == "HX-Request"

    frag = client.get("/benchmarks/jb-mini?flip=yes", headers=HX)
    assert frag.status_code == 200
    assert frag.text.lstrip().startswith('<section id="results"')
    assert "<html" not in frag.text and 'id="filters"' not in frag.text
    assert row_ids(frag.text) == {"pair/002", "pair-005"}
    # htmx pushes the canonical URL: the judge is named explicitly, blanks dropped.
    assert frag.headers["HX-Push-Url"] == (
        "/benchmarks/jb-mini?judge=arena_hard%2Fo1-mini-2024-09-12&flip=yes"
    )


def test_history_restore_gets_the_full_page(client: TestClient) -> None:
    r = client.get(
        "/benchmarks/jb-mini?flip=yes", headers={**HX, "HX-History-Restore-Request": "true"}
    )
    assert "<html" in r.text and row_ids(r.text) == {"pair/002", "pair-005"}


def test_blank_form_fields_mean_no_condition(client: TestClient) -> None:
    blanks = "q=&label=&label=&slice=&judge=&ab=&ba=&flip=&score_detector=&score_min=&score_max="
    r = client.get(f"/benchmarks/jb-mini?{blanks}", headers=HX)
    assert r.status_code == 200
    assert row_ids(r.text) == {p.external_id for p in f.PAIRS}
    assert r.headers["HX-Push-Url"] == "/benchmarks/jb-mini"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("label=reference%3DB", {"pair/002", "pair-004", "pair-005"}),
        ("slice=source%3Dmmlu-pro-law&flip=no", {"pair/001:a|b", "pair-004"}),
        ("ab=B&ba=invalid", {"pair-003-xss"}),
        (f"score_detector={quote(f.RM_1)}&score_min=0&score_max=1", {"pair-003-xss"}),
        ("q=zebra", {"pair-005"}),
    ],
)
def test_benchmark_page_filters_rows(client: TestClient, query: str, expected: set[str]) -> None:
    r = client.get(f"/benchmarks/jb-mini?{query}")
    assert r.status_code == 200
    assert row_ids(r.text) == expected


def test_filter_form_reflects_the_url(client: TestClient) -> None:
    r = client.get("/benchmarks/jb-mini?label=reference%3DB&ab=tie&q=zeb")
    assert '<option value="reference=B" selected>' in r.text
    assert '<option value="tie" selected>' in r.text
    assert 'name="q" value="zeb"' in r.text


def test_pagination_links_keep_the_filter(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    f.seed_benchmarks(factory)
    with api_client(settings.model_copy(update={"page_size": 2})) as c:
        first = c.get("/benchmarks/jb-mini?label=reference%3DB")
        assert len(row_ids(first.text)) == 2
        assert "page 1 of 2" in first.text
        nxt = re.search(r'<a href="([^"]+)"[^>]*rel="next"', first.text)
        assert nxt is not None
        assert nxt.group(1) == "/benchmarks/jb-mini?label=reference%3DB&amp;page=2"
        second = c.get(nxt.group(1).replace("&amp;", "&"))
        assert row_ids(second.text) == {"pair/002", "pair-004", "pair-005"} - row_ids(first.text)
        past = c.get("/benchmarks/jb-mini?page=9")
        assert past.status_code == 200 and "No rows on page 9" in past.text


def test_instance_page_pairwise_side_by_side(client: TestClient) -> None:
    r = client.get(instance_path("jb-mini", "pair/002"))
    assert r.status_code == 200
    html = r.text
    assert 'class="pane pane-a"' in html and 'class="pane pane-b"' in html
    a, b, judges = (html.index(s) for s in ("pane-a", "pane-b", 'class="judges"'))
    assert a < b < judges
    # AB chose A, BA chose B: a flip, shown with its label.
    assert '<span class="choice choice-A">A</span>' in html
    assert '<span class="choice choice-B">B</span>' in html
    assert "flip-yes" in html
    # Scores: three decimals, the full value on hover (the score filter).
    assert f.RM_1 in html and '<span class="score" title="-1.0">-1.000</span>' in html


def test_instance_page_shows_label_history(client: TestClient) -> None:
    r = client.get(instance_path("jb-mini", "pair-004"))
    history = r.text[r.text.index('<span class="label-name">reference</span>') :]
    history = history[history.index("<tbody>") : history.index("</tbody>")]
    assert history.count("<tr>") == 2  # import A, then reviewer B
    assert "import" in history and "reviewer" in history
    assert "key was wrong" in history


def test_untrusted_text_is_escaped(client: TestClient) -> None:
    pages = [
        client.get(instance_path("jb-mini", "pair-003-xss")).text,
        client.get("/benchmarks/jb-mini").text,
        client.get("/benchmarks/jb-mini/instances/pair-004").text,
    ]
    inst, table, labelled = pages
    for raw in (f.SCRIPT, f.IMG, f.RAW_SCRIPT, "<b>bold</b>"):
        assert all(raw not in page for page in pages), raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in inst
    assert "&lt;img src=x onerror=alert(2)&gt;" in inst
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in inst  # judge raw output
    assert "&lt;b&gt;bold&lt;/b&gt;" in table  # prompt preview in the table
    assert "&lt;script&gt;alert(4)&lt;/script&gt;" in labelled  # label reason
    assert "<script>alert(4)</script>" not in labelled
    # Whitespace of responses is kept for pre-wrap rendering.
    assert "\n\n    indented line" in inst


@pytest.mark.parametrize("external_id", ["pair/001:a|b", "q?x#y%z"])
def test_odd_external_ids_round_trip(client: TestClient, external_id: str) -> None:
    page = client.get(instance_path("jb-mini", external_id))
    assert page.status_code == 200
    assert f'<h1 class="id">{external_id}</h1>' in page.text
    table = client.get("/benchmarks/jb-mini").text
    assert f'href="{instance_path("jb-mini", external_id)}' in table


def test_previous_and_next_follow_the_filter(client: TestClient) -> None:
    r = client.get(instance_path("jb-mini", "pair-004") + "?label=reference%3DB&page=2")
    nxt = re.search(r'<a rel="next" href="([^"]+)"', r.text)
    assert nxt is not None
    assert nxt.group(1) == "/benchmarks/jb-mini/instances/pair-005?label=reference%3DB&amp;page=2"
    prev = client.get(instance_path("jb-mini", "pair-005") + "?label=reference%3DB")
    assert re.search(r'<a rel="prev" href="/benchmarks/jb-mini/instances/pair-004\?', prev.text)
    back = re.search(r'<a href="([^"]+)">back to table</a>', r.text)
    assert back is not None
    assert back.group(1) == "/benchmarks/jb-mini?label=reference%3DB&amp;page=2"


def test_instance_fragment_for_htmx(client: TestClient) -> None:
    r = client.get(instance_path("jb-mini", "pair-004"), headers=HX)
    assert "<html" not in r.text and 'class="instance-head"' in r.text
    assert "<title>pair-004 · jb-mini · Appellate</title>" in r.text
    assert r.headers["HX-Push-Url"] == "/benchmarks/jb-mini/instances/pair-004"


def test_statement_and_response_pages(client: TestClient) -> None:
    st = client.get(instance_path("truth-mini", "cities-0002"))
    assert st.status_code == 200
    assert "The city of Lyon is in Japan." in st.text
    assert "pane-a" not in st.text
    assert f.PROBE in st.text and "layer" in st.text
    table = client.get("/benchmarks/truth-mini?label=truth%3D1")
    assert row_ids(table.text) == {"cities-0001", "sp-en-0001"}

    resp = client.get(instance_path("lies-mini", "flat-earth/001"))
    for text in (
        "You are a committed flat-earther.",
        "What shape is the Earth?",
        "The Earth is flat, obviously.",
        "on-policy",
    ):
        assert text in resp.text
    assert "<dt>persona</dt><dd>flat-earther</dd>" in resp.text


@pytest.mark.parametrize(
    "path",
    ["/benchmarks/nope", "/benchmarks/jb-mini/instances/nope", "/no/such/page"],
)
def test_not_found_pages(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert "404" in r.text and "Not found" in r.text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("ab=X", "ab: Input should be"),
        ("label=nolabel%3D1", "unknown label set &#39;nolabel&#39;"),
        ("label=reference", "expected NAME=VALUE"),
        ("score_min=abc", "score_min: Input should be a valid number"),
        ("score_min=2&score_max=1", "score_min is greater than score_max"),
        ("judge=nobody&ab=A", "no judge &#39;nobody&#39;"),
        ("slice=colour%3Dred", "unknown slice field"),
        ("page=0", "page: Input should be greater than or equal to 1"),
    ],
)
def test_bad_filters_answer_422_with_a_message(
    client: TestClient, query: str, message: str
) -> None:
    r = client.get(f"/benchmarks/jb-mini?{query}")
    assert r.status_code == 422
    assert message in r.text
    assert '<a href="/benchmarks/jb-mini">Clear the filters</a>' in r.text
    frag = client.get(f"/benchmarks/jb-mini?{query}", headers=HX)
    assert frag.status_code == 422
    assert frag.text.lstrip().startswith('<section id="results" class="error-box"')


def test_pages_follow_data_version(client: TestClient, factory: sessionmaker[Session]) -> None:
    assert row_ids(client.get("/benchmarks/jb-mini?label=reference%3DB").text) == {
        "pair/002",
        "pair-004",
        "pair-005",
    }
    from app.db import transaction
    from app.services.evidence.labels import append_label
    from app.tables import Instance

    with transaction(factory) as session:
        inst = session.query(Instance).filter_by(external_id="pair/002").one()
        append_label(session, inst.id, "reference", "A", source="reviewer")
    f.bump_version(factory, "jb-mini")
    assert row_ids(client.get("/benchmarks/jb-mini?label=reference%3DB").text) == {
        "pair-004",
        "pair-005",
    }


def test_static_assets_are_served(client: TestClient) -> None:
    from app.web.templating import STATIC_DIR

    page = client.get("/").text
    assets = re.findall(r'(?:href|src)="(/static/[^"]+)"', page)
    # Every page loads the stylesheet, htmx and the app's script from /static.
    assert {"/static/app.css", "/static/vendor/htmx.min.js", "/static/app.js"} <= set(assets)
    for url in assets:
        r = client.get(url)
        assert r.status_code == 200, url
        kind = "text/css" if url.endswith(".css") else "javascript"
        assert kind in r.headers["content-type"], (url, r.headers["content-type"])
        on_disk = (STATIC_DIR / url.removeprefix("/static/")).read_bytes()
        assert on_disk and r.content == on_disk, url
    assert client.get("/static/app.css").status_code == 200
    assert client.get("/static/vendor/htmx.min.js").status_code == 200


def test_a_recreated_benchmark_is_not_served_from_cache(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import delete

    from app.db import transaction
    from app.tables import Benchmark, Instance

    assert len(row_ids(client.get("/benchmarks/truth-mini").text)) == 4
    assert client.get("/api/benchmarks/truth-mini").json()["summary"]["instances"] == 4
    with transaction(factory) as session:
        old = session.query(Benchmark).filter_by(name="truth-mini").one()
        same_id, same_version = old.id, old.data_version
        # The database cascades to the instances, labels and scores.
        session.execute(delete(Benchmark).where(Benchmark.id == same_id))
        session.expunge(old)
        # Same id and data version, as a store recreated under a running server would give.
        new = Benchmark(
            id=same_id,
            name="truth-mini",
            kind="statement",
            data_version=same_version,
            created_at=datetime.now(UTC) + timedelta(seconds=1),
        )
        session.add(new)
        session.flush()
        session.add(
            Instance(benchmark_id=new.id, external_id="only-one", group_key="g", payload={})
        )
    assert row_ids(client.get("/benchmarks/truth-mini").text) == {"only-one"}
    facets = client.get("/api/benchmarks/truth-mini").json()
    assert (facets["summary"]["instances"], facets["label_sets"]) == (1, [])
