"""The savings report and page on real two-order judgments: JudgeBench's o1-mini judge.

The flips are o1-mini's own (AB vs BA in the published outputs); two rankers score every pair
(stored scores: one that leans on the flips, one that does not). Every figure of the report's
curves is checked against a direct count from the judgments and the stored scores.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.judgebench import import_judgebench
from app.services.evidence.detectors import ensure_detector
from app.services.metrics.judge_savings import judge_savings
from app.settings import Settings
from app.tables import Detector, Judgment, Score
from tests.ingest.test_helpers import O1_MINI, O1_MINI_JUDGE, PAIRS_GPT4O
from tests.support.auth_support import api_client

PROBE, BASELINE = f"probe:{O1_MINI_JUDGE}", f"baseline:{O1_MINI_JUDGE}"


def _direct_flips(session: Session) -> dict[int, int]:
    """``{pair: 1 if o1-mini's AB and BA choices differ}`` over pairs valid in both orders."""
    judge = session.scalar(select(Detector.id).where(Detector.name == O1_MINI_JUDGE))
    by_pair: dict[int, dict[str, str]] = {}
    for iid, order, choice in session.execute(
        select(Judgment.instance_id, Judgment.order, Judgment.choice).where(
            Judgment.detector_id == judge
        )
    ):
        by_pair.setdefault(iid, {})[order] = choice
    return {
        iid: int(o["AB"] != o["BA"])
        for iid, o in by_pair.items()
        if {"AB", "BA"} <= set(o) and "invalid" not in (o["AB"], o["BA"])
    }


@pytest.fixture
def seeded(factory: sessionmaker[Session]) -> dict[str, dict[int, float]]:
    """JudgeBench with o1-mini, and the two rankers' scores on every pair (seeded)."""
    with transaction(factory) as s:
        import_judgebench(s, [PAIRS_GPT4O], outputs=[O1_MINI], benchmark="jb")
        flips = _direct_flips(s)
        rng = np.random.default_rng(0)
        scores: dict[str, dict[int, float]] = {}
        for name, signal in ((PROBE, 1.5), (BASELINE, 0.0)):
            det = ensure_detector(s, name, "probe" if name == PROBE else "baseline")
            scores[name] = {}
            for iid in sorted(flips):
                value = float(signal * flips[iid] + rng.normal())
                s.add(Score(detector_id=det.id, instance_id=iid, score=value, details={}))
                scores[name][iid] = value
        s.flush()
    return scores


def test_the_report_equals_a_direct_count(
    factory: sessionmaker[Session], seeded: dict[str, dict[int, float]]
) -> None:
    with transaction(factory) as s:
        flips = _direct_flips(s)
        report = judge_savings(s, "jb", O1_MINI_JUDGE, resamples=200)
    ids = sorted(flips)
    y = np.array([flips[i] for i in ids])
    assert report["n"] == report["labelled"] == len(ids) and report["flips"] == int(y.sum())
    assert report["rankers"] == [PROBE, BASELINE, "random"]
    for name in (PROBE, BASELINE):
        s = np.array([seeded[name][i] for i in ids])
        found = np.concatenate(([0], np.cumsum(y[np.argsort(-s)])))
        curve = report["curves"][name]
        assert [p["recovered"] for p in curve["points"]] == pytest.approx(
            [found[p["k"]] for p in curve["points"]]
        )
        assert curve["k_for"]["0.5"] == int(np.argmax(found >= 0.5 * y.sum()))
        assert curve["k_for"]["0.8"] == int(np.argmax(found >= 0.8 * y.sum()))
    # The ranker that leans on the flips beats the random order by a clear margin.
    probe_vs_random = next(
        d for d in report["differences"] if (d["a"], d["b"]) == (PROBE, "random")
    )
    assert probe_vs_random["area_ci"][0] > 0
    with transaction(factory) as s, pytest.raises(InvalidInput, match="no flip probe"):
        judge_savings(s, "jb", O1_MINI_JUDGE, rankers=[])


@pytest.fixture
def client(settings: Settings, seeded: dict[str, dict[int, float]]) -> Iterator[TestClient]:
    with api_client(settings) as c:
        yield c


def test_the_page_shows_the_curves_and_says_why_when_it_cannot(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as s:
        report = judge_savings(s, "jb", O1_MINI_JUDGE, resamples=1000)
    r = client.get("/benchmarks/jb/savings", params={"judge": O1_MINI_JUDGE})
    assert r.status_code == 200
    assert r.text.count('<polyline class="curve"') == 3
    for name in (PROBE, BASELINE, "random"):
        row = re.search(rf'<tr data-ranker="{re.escape(name)}">(.*?)</tr>', r.text, re.S)
        assert row is not None
        cells = re.findall(r'<td class="num">(\d+)', row.group(1))
        want = report["curves"][name]["k_for"]
        assert cells[:2] == [str(want["0.5"]), str(want["0.8"])]  # then the area
    assert f"{report['n']} pairs judged in both orders" in html.unescape(r.text)
    # The metrics page links each judge to its savings page.
    m = client.get("/benchmarks/jb/metrics", params={"label": f"flip:{O1_MINI_JUDGE}"})
    assert "/benchmarks/jb/savings?judge=arena_hard%2Fo1-mini-2024-09-12" in m.text
    # A judge with no flip probe: the page says what to run.
    with transaction(factory) as s:
        s.execute(Score.__table__.delete())
        for name in (PROBE, BASELINE):
            s.delete(s.scalar(select(Detector).where(Detector.name == name)))
    r = client.get("/benchmarks/jb/savings", params={"judge": O1_MINI_JUDGE})
    assert r.status_code == 200
    assert "appellate probe fit jb --judge arena_hard/o1-mini-2024-09-12" in html.unescape(r.text)
    assert client.get("/benchmarks/nope/savings").status_code == 404
