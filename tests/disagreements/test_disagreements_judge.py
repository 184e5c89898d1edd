"""Detector-vs-judge disagreements on the bundled JudgeBench data: service, CLI, page, CSV, API.

The expected list is computed here straight from the Score and Judgment rows.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

import pytest
import typer
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli.metrics import register
from app.db import transaction
from app.errors import InvalidInput, NotFound
from app.ingest.judgebench import import_judgebench
from app.services.disagreements.lists import disagreements
from app.settings import Settings
from app.tables import Detector, Instance, Judgment, Score
from tests.ingest.test_helpers import O1_MINI, O1_MINI_JUDGE, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.metrics.test_service import build
from tests.support.auth_support import api_client

REWARD = "reward_model/Skywork_Skywork-Reward-Gemma-2-27B"
MODE = "detector-vs-judge"


@pytest.fixture
def loaded(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    """The GPT-4o pairs with the o1-mini judge and the reward models."""
    with transaction(factory) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])
    return factory


def expected(session: Session, detector: str, judge: str, cut: float) -> dict[str, float]:
    """``{external_id: confidence}`` computed directly from the rows (the documented rule)."""

    def detector_id(name: str) -> int:
        found = session.scalar(select(Detector.id).where(Detector.name == name))
        assert found is not None
        return found

    scores = dict(
        session.execute(
            select(Instance.external_id, Score.score)
            .join(Instance, Instance.id == Score.instance_id)
            .where(Score.detector_id == detector_id(detector))
        ).all()
    )
    ab = dict(
        session.execute(
            select(Instance.external_id, Judgment.choice)
            .join(Instance, Instance.id == Judgment.instance_id)
            .where(Judgment.detector_id == detector_id(judge), Judgment.order == "AB")
        ).all()
    )
    out = {}
    for ext, choice in ab.items():
        p = scores.get(ext)
        if p is None or choice == "invalid":
            continue
        conf = max(p, 1 - p)
        if conf >= cut and choice != ("A" if p >= 0.5 else "B"):  # a tie always differs
            out[ext] = conf
    return out


@pytest.mark.parametrize("cut", [0.8, 0.95])
def test_equals_direct_computation(loaded: sessionmaker[Session], cut: float) -> None:
    with loaded() as session:
        found = disagreements(
            session, "judgebench", [REWARD], mode=MODE, judge=O1_MINI_JUDGE, min_confidence=cut
        )
        want = expected(session, REWARD, O1_MINI_JUDGE, cut)
    assert want  # the bundled data has such items
    assert {d.external_id: d.confidence for d in found.items} == pytest.approx(want)
    assert found.total == len(want) and found.judge == O1_MINI_JUDGE
    assert found.min_confidence == cut and found.as_dict()["judge"] == O1_MINI_JUDGE
    keys = [(-(d.confidence or 0.0), d.external_id) for d in found.items]
    assert keys == sorted(keys)
    for d in found.items:
        assert d.score is not None and d.confidence == pytest.approx(max(d.score, 1 - d.score))
        assert REWARD in d.reason and O1_MINI_JUDGE in d.reason
        assert d.label in ("A", "B")


def test_default_cut_and_tie_rule(factory: sessionmaker[Session]) -> None:
    def item(i: int, p: float, choice: str) -> dict[str, object]:
        return {
            "id": f"t{i}",
            "labels": {"reference": "A"},
            "scores": {"probe": p},
            "judgments": {"judge": {"AB": (choice, None, None)}},
        }

    items = [
        item(0, 0.9, "B"),  # confident A vs B: listed
        item(1, 0.95, "tie"),  # tie counts: listed first
        item(2, 0.05, "invalid"),  # invalid skipped
        item(3, 0.7, "B"),  # not confident
        item(4, 0.1, "B"),  # agrees
        item(5, 0.15, "A"),  # confident B vs A: listed
    ]
    with transaction(factory) as session:
        build(session, items)
    with factory() as session:
        found = disagreements(session, "bench", ["probe"], mode=MODE, judge="judge")
    assert [d.external_id for d in found.items] == ["t1", "t0", "t5"]
    assert found.min_confidence == 0.8


def test_errors(loaded: sessionmaker[Session]) -> None:
    with loaded() as session:
        with pytest.raises(NotFound, match="no detector named 'ghost'"):
            disagreements(session, "judgebench", [REWARD], mode=MODE, judge="ghost")
        with pytest.raises(InvalidInput, match="needs a judge"):
            disagreements(session, "judgebench", [REWARD], mode=MODE)
        with pytest.raises(InvalidInput, match="detector-vs-judge mode only"):
            disagreements(session, "judgebench", [REWARD], judge=O1_MINI_JUDGE)
    # o1-mini scores the pairs now (its two-order P(A better)); a detector without scores fails.
    with transaction(loaded) as session:
        session.add(Detector(name="unscored", kind="judge"))
    with loaded() as session, pytest.raises(InvalidInput, match="no scores"):
        disagreements(session, "judgebench", ["unscored"], mode=MODE, judge=O1_MINI_JUDGE)


@pytest.fixture
def runner(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, loaded: sessionmaker[Session]
) -> CliRunner:
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    return CliRunner()


def test_cli(runner: CliRunner, loaded: sessionmaker[Session]) -> None:
    cli = typer.Typer()
    register(cli)
    args = ["disagreements", "judgebench", "-d", REWARD, "--mode", MODE]
    ok = runner.invoke(cli, [*args, "--judge", O1_MINI_JUDGE, "--json"])
    assert ok.exit_code == 0, ok.output
    with loaded() as session:
        want = expected(session, REWARD, O1_MINI_JUDGE, 0.8)
    found = json.loads(ok.stdout)
    assert {i["external_id"] for i in found["items"]} == set(want)
    assert found["judge"] == O1_MINI_JUDGE and found["mode"] == MODE
    bad = runner.invoke(cli, [*args, "--judge", "ghost", "--json"])
    assert bad.exit_code == 2 and "no detector named 'ghost'" in bad.stderr
    missing = runner.invoke(cli, [*args, "--json"])
    assert missing.exit_code == 2 and "needs a judge" in missing.stderr


@pytest.fixture
def client(settings: Settings, loaded: sessionmaker[Session]) -> Iterator[TestClient]:
    with api_client(settings) as c:
        yield c


def test_page_csv_api(client: TestClient, loaded: sessionmaker[Session]) -> None:
    params = {"detector": REWARD, "mode": MODE, "judge": O1_MINI_JUDGE, "min_confidence": 0.9}
    with loaded() as session:
        want = disagreements(
            session, "judgebench", [REWARD], mode=MODE, judge=O1_MINI_JUDGE, min_confidence=0.9
        ).as_dict()
    page = client.get("/benchmarks/judgebench/disagreements", params=params)
    assert page.status_code == 200
    assert f'<option value="{MODE}" selected>' in page.text
    assert f'<option value="{O1_MINI_JUDGE}" selected>' in page.text
    assert "judge=arena_hard%2Fo1-mini" in page.text  # the CSV link keeps the judge
    for item in want["items"]:
        assert item["external_id"] in page.text
    export = client.get("/benchmarks/judgebench/disagreements.csv", params=params)
    rows = list(csv.DictReader(io.StringIO(export.text)))
    assert [r["external_id"] for r in rows] == [i["external_id"] for i in want["items"]]
    api = client.get("/api/benchmarks/judgebench/disagreements", params=params).json()
    assert api == want
    # No judge chosen yet: a prompt, not an error; a judge left in the URL is ignored elsewhere.
    prompt = client.get(
        "/benchmarks/judgebench/disagreements", params={"detector": REWARD, "mode": MODE}
    )
    assert prompt.status_code == 200 and "Choose a detector" in prompt.text
    other = client.get(
        "/api/benchmarks/judgebench/disagreements",
        params={"detector": REWARD, "judge": O1_MINI_JUDGE},
    )
    assert other.status_code == 200 and other.json()["judge"] is None
    ghost = client.get("/api/benchmarks/judgebench/disagreements", params={**params, "judge": "x"})
    assert ghost.status_code == 404
