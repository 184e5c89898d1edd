"""Metrics and disagreements pages on both dialects, on the bundled JudgeBench data."""

from __future__ import annotations

import csv
import html
import io
import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.services.disagreements.lists import disagreements
from app.services.evidence.benchmarks import bump_data_version
from app.services.evidence.labels import append_label, latest_label_values
from app.services.metrics.report import metrics_report
from app.services.metrics.svg_plots import Series, curve_plot
from app.settings import Settings
from app.tables import Benchmark, Instance
from app.web.cells import score_text
from app.web.disagreement_pages import PAGE_ROWS
from tests.ingest.test_helpers import O1_MINI, O1_MINI_JUDGE, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.support.auth_support import api_client
from tests.support.paging_support import every_page

HX = {"HX-Request": "true"}
R = 200  # resamples: enough for an interval, quick enough for a test
REWARD = "reward_model/Skywork_Skywork-Reward-Gemma-2-27B"


@pytest.fixture
def client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    with transaction(factory) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])
    with api_client(settings) as c:
        yield c


def cells(row_html: str) -> list[str]:
    """Text of each <td> of a row, tags stripped and entities decoded."""
    return [
        html.unescape(re.sub(r"<[^>]+>", "", td)).strip()
        for td in re.findall(r"<td[^>]*>(.*?)</td>", row_html, re.S)
    ]


def matrix_rows(page: str) -> dict[str, list[str]]:
    """Metric-matrix rows by detector (all-items rows only)."""
    table = re.search(r'<table class="grid metric-matrix">(.*?)</table>', page, re.S)
    assert table is not None
    out = {}
    for m in re.finditer(
        r'<tr class="all" data-detector="([^"]*)">(.*?)</tr>', table.group(1), re.S
    ):
        out[html.unescape(m.group(1))] = cells(m.group(2))
    return out


def test_metrics_page_shows_judge_summary_and_service_numbers(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    r = client.get(f"/benchmarks/judgebench/metrics?resamples={R}")
    assert r.status_code == 200
    with factory() as session:
        report = metrics_report(session, "judgebench", "reference", resamples=R)
    # o1-mini: 350 pairs, 110 flips, and the flip count links to those pairs.
    judge = re.search(rf'<tr data-judge="{re.escape(O1_MINI_JUDGE)}">(.*?)</tr>', r.text, re.S)
    assert judge is not None
    row = cells(judge.group(1))
    assert row[1] == "350" and row[3] == "110"
    flips_href = re.search(r'<td class="num flips"><a href="([^"]*)"', judge.group(1))
    assert flips_href is not None
    assert html.unescape(flips_href.group(1)) == (
        f"/benchmarks/judgebench?judge={quote(O1_MINI_JUDGE, safe='')}&flip=yes"
    )
    linked = client.get(html.unescape(flips_href.group(1)))
    assert re.search(r"\b110\b", linked.text)
    # Each detector's AUROC / AUPRC / Brier equal the service's, interval included: the three
    # reward models and o1-mini (its two-order score).
    rows = matrix_rows(r.text)
    expected = [x for x in report["rows"] if x["slice"] is None]
    assert set(rows) == {x["detector"] for x in expected} and len(rows) == 4
    assert O1_MINI_JUDGE in rows
    for x in expected:
        got = rows[x["detector"]]
        assert got[1] == f"{x['n']:,}"
        for col, key in ((3, "auroc"), (4, "auprc"), (5, "brier")):
            lo, hi = x[f"{key}_ci"]
            assert got[col] == f"{x[key]:,.3f}[{lo:.3f}, {hi:.3f}]"
        # Choice-matched AUROC is undefined against `reference`: a dash with a reason.
        assert got[6] == "—"
    assert 'title="Choice-matched AUROC is undefined' in r.text
    # Plots: one ROC and one PR polyline per detector, a histogram per detector.
    roc = re.search(r'<svg class="plot roc".*?</svg>', r.text, re.S)
    assert roc is not None and roc.group(0).count('<polyline class="curve"') == 4
    assert r.text.count('<svg class="plot histogram"') == 4
    assert '<svg class="plot reliability"' in r.text and '<svg class="plot pr"' in r.text


def test_metrics_slices_json_twin_and_fragment(client: TestClient) -> None:
    r = client.get(f"/benchmarks/judgebench/metrics?resamples={R}&slice=source&detector={REWARD}")
    assert r.status_code == 200
    # A detector x slice pivot per metric; the detectors table keeps the all-items rows.
    pivots = re.findall(r'<table class="grid metric-pivot">(.*?)</table>', r.text, re.S)
    assert pivots and all(p.count("<tr data-detector=") == 1 for p in pivots)
    assert len(matrix_rows(r.text)) == 1
    api = client.get(
        "/api/benchmarks/judgebench/metrics",
        params={"resamples": R, "slice": "source", "detector": REWARD},
    ).json()
    assert api["slice_field"] == "source" and api["resamples"] == R
    slices = [x["slice"] for x in api["rows"] if x["slice"] not in (None, "(macro-average)")]
    assert len(slices) >= 2 and pivots[0].count('<th class="num slice-name">') == len(slices)
    assert '<th class="num macro">macro-average</th>' in pivots[0]
    frag = client.get(f"/benchmarks/judgebench/metrics?resamples={R}", headers=HX)
    assert frag.text.lstrip().startswith('<section id="results"') and "<html" not in frag.text


def test_metrics_bad_parameters(client: TestClient) -> None:
    assert client.get("/benchmarks/nope/metrics").status_code == 404
    bad = client.get("/benchmarks/judgebench/metrics?label=nope&resamples=10")
    assert bad.status_code == 404 and "nope" in bad.text
    assert client.get("/benchmarks/judgebench/metrics?resamples=0").status_code == 422
    assert client.get("/api/benchmarks/judgebench/metrics?detector=nobody").status_code == 404


def test_metrics_resolved_labels(client: TestClient, factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        ids = session.scalars(select(Instance.id).order_by(Instance.id).limit(20)).all()
        for iid, value in latest_label_values(session, "reference", ids).items():
            opposite = {"A": "B", "B": "A"}[value or "A"]
            append_label(session, iid, "reference", opposite, source="adjudication", author="r")
        bench = session.scalars(select(Benchmark)).one()
        bump_data_version(session, bench)
    params = {"resamples": R, "detector": REWARD, "labels": "resolved", "k": 3}
    api = client.get("/api/benchmarks/judgebench/metrics", params=params)
    assert api.status_code == 200
    with factory() as session:
        resolved = metrics_report(
            session, "judgebench", "reference", [REWARD], resamples=R, labels="resolved", k=3
        )
        original = metrics_report(session, "judgebench", "reference", [REWARD], resamples=R)
    assert api.json() == resolved
    assert (resolved["labels"], resolved["k"]) == ("resolved", 3)
    assert resolved["rows"][0]["auroc"] != original["rows"][0]["auroc"]
    page = client.get("/benchmarks/judgebench/metrics", params=params)
    assert page.status_code == 200
    assert '<option value="resolved" selected>' in page.text
    assert 'name="k" value="3"' in page.text
    for bad in ({"labels": "latest"}, {"labels": "resolved", "k": 0}):
        assert client.get("/api/benchmarks/judgebench/metrics", params=bad).status_code == 422


def page_items(page: str) -> list[tuple[str, str, str, str, str]]:
    """(href, external id, label, score, reason) of each disagreement row."""
    table = re.search(r'<table class="grid disagreements[^"]*">(.*?)</table>', page, re.S)
    assert table is not None
    # Columns found by their headings: the table also shows a text preview and slices.
    heads = [
        html.unescape(re.sub(r"<[^>]+>", "", th)).strip()
        for th in re.findall(r"<th[^>]*>(.*?)</th>", table.group(1), re.S)
    ]
    at = {name: heads.index(name) for name in ("Item", "Label", "Score", "Reason")}
    out = []
    for tr in re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)[1:]:
        href = re.search(r'<td class="id"><a href="([^"]*)"', tr)
        assert href is not None
        c = cells(tr)
        item, label, score, reason = (c[at[n]] for n in ("Item", "Label", "Score", "Reason"))
        out.append((html.unescape(href.group(1)), item, label, score, reason))
    return out


def test_disagreements_page_and_csv_equal_the_service(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    params = {"detector": REWARD, "min_confidence": "0.9"}
    r = client.get("/benchmarks/judgebench/disagreements", params=params)
    assert r.status_code == 200
    with factory() as session:
        expected = disagreements(session, "judgebench", [REWARD], min_confidence=0.9, limit=1000)
    assert expected.items, "the reward model contradicts some reference labels"
    rows = page_items(r.text)
    assert [x[1] for x in rows] == [d.external_id for d in expected.items]
    for (href, ext, label, score, reason), d in zip(rows, expected.items, strict=True):
        assert href == f"/benchmarks/judgebench/instances/{quote(ext, safe='')}"
        assert label == d.label and reason == d.reason
        assert score == score_text(d.score)
    # Every link opens the instance page.
    assert client.get(rows[0][0]).status_code == 200

    export = client.get("/benchmarks/judgebench/disagreements.csv", params=params)
    assert export.status_code == 200
    assert export.headers["content-type"].startswith("text/csv")
    assert (
        'filename="judgebench-disagreements-threshold.csv"' in export.headers["content-disposition"]
    )
    parsed = list(csv.DictReader(io.StringIO(export.text)))
    assert [(p["external_id"], p["label"], p["reason"]) for p in parsed] == [
        (x[1], x[2], x[4]) for x in rows
    ]
    assert [score_text(float(p["score"])) for p in parsed] == [x[3] for x in rows]
    api = client.get("/api/benchmarks/judgebench/disagreements", params=params).json()
    assert api == expected.as_dict()


def test_disagreements_judge_orders_and_errors(client: TestClient) -> None:
    r = client.get(
        "/benchmarks/judgebench/disagreements",
        params={"detector": O1_MINI_JUDGE, "mode": "judge-orders"},
    )
    assert r.status_code == 200
    # Every flipped pair, a page of PAGE_ROWS at a time.
    assert [len(page_items(p)) for p in every_page(client, r.text)] == [PAGE_ROWS, 110 - PAGE_ROWS]
    bad = client.get(
        "/benchmarks/judgebench/disagreements", params={"detector": REWARD, "mode": "bogus"}
    )
    assert bad.status_code == 422 and "unknown mode" in bad.text
    assert (
        client.get(
            "/benchmarks/judgebench/disagreements.csv", params={"detector": "nobody"}
        ).status_code
        == 404
    )
    over = client.get(
        "/benchmarks/judgebench/disagreements", params={"detector": REWARD, "min_confidence": 2}
    )
    assert over.status_code == 422
    # No detector chosen: the form and a prompt, not an error.
    empty = client.get("/benchmarks/judgebench/disagreements")
    assert empty.status_code == 200 and "Choose a detector" in empty.text


def test_ids_and_reasons_are_escaped(client: TestClient, factory: sessionmaker[Session]) -> None:
    evil = '<img src=x onerror=alert(1)>/"a&b'
    with transaction(factory) as session:
        flipped = disagreements(session, "judgebench", [O1_MINI_JUDGE], mode="judge-orders")
        inst = session.get(Instance, flipped.items[0].instance_id)
        assert inst is not None
        inst.external_id = evil
        # Any write to an instance bumps the versions; the ranked list kept above (which holds
        # the old id) is then never served again.
        bench = session.scalars(select(Benchmark).where(Benchmark.name == "judgebench")).one()
        bump_data_version(session, bench)
    r = client.get(
        "/benchmarks/judgebench/disagreements",
        params={"detector": O1_MINI_JUDGE, "mode": "judge-orders"},
    )
    assert r.status_code == 200
    assert "<img src=x" not in r.text
    assert str(escape(evil)) in r.text
    assert evil in {x[1] for x in page_items(r.text)}
    hrefs = {x[0] for x in page_items(r.text)}
    assert f"/benchmarks/judgebench/instances/{quote(evil, safe='')}" in hrefs


def test_svg_labels_are_escaped() -> None:
    svg = str(
        curve_plot(
            "roc",
            "<b>t</b>",
            [Series('<script>x</script>"', [0, 1], [0, 1])],
            x_label="a<b",
            y_label="c&d",
            reference=None,
        )
    )
    assert "<script>" not in svg and "<b>" not in svg
    assert "&lt;script&gt;" in svg and "a&lt;b" in svg and "c&amp;d" in svg
    assert svg.count("<polyline") == 1
