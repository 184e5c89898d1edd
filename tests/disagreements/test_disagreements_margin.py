"""``margin`` mode on every surface: service, CLI, page form, CSV, API and a review queue.

The expected list is computed here straight from the Score rows: scores within ``band`` of 0.5,
closest first, ties by external id.
"""

from __future__ import annotations

import csv
import io
import json
import re
from urllib.parse import urlencode

import pytest
import typer
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli.metrics import register
from app.errors import InvalidInput
from app.services.disagreements.disagreement_query import build_query
from app.services.disagreements.lists import find_disagreements
from app.tables import Detector, Instance, QueueItem, Score
from tests.disagreements.test_disagreements_judge import client, loaded, runner

__all__ = ["client", "loaded", "runner"]  # shared fixtures: JudgeBench with o1-mini and 3 RMs

RM = "reward_model/internlm_internlm2-7b-reward"
PAGE = "/benchmarks/judgebench/disagreements"
HX = {"HX-Request": "true"}


def expected(session: Session, band: float) -> list[tuple[str, float]]:
    """``(external_id, score)`` of the unsure items in rank order, from the rows."""
    rows = session.execute(
        select(Instance.external_id, Score.score)
        .join(Score, Score.instance_id == Instance.id)
        .join(Detector, Detector.id == Score.detector_id)
        .where(Detector.name == RM)
    ).all()
    near = [(ext, p) for ext, p in rows if abs(p - 0.5) <= band]
    return sorted(near, key=lambda row: (abs(row[1] - 0.5), row[0]))


@pytest.mark.parametrize("band", [None, 0.05, 0.5])
def test_service_equals_direct_computation(loaded: sessionmaker[Session], band: float) -> None:
    values = {} if band is None else {"band": band}
    with loaded() as session:
        found = find_disagreements(
            session, "judgebench", build_query("margin", [RM], values=values)
        )
        want = expected(session, 0.1 if band is None else band)
    assert 0 < len(want) < 350 or band == 0.5
    assert [(d.external_id, d.score) for d in found.items] == want
    for d in found.items:
        assert d.score is not None and d.confidence == max(d.score, 1 - d.score)
        assert d.label in ("A", "B") and RM in d.reason
    shown = found.as_dict()
    assert shown["band"] == (0.1 if band is None else band) and shown["positive"] is None
    assert (shown["min_confidence"], shown["k"], shown["judge"]) == (None, None, None)


def test_band_is_checked(loaded: sessionmaker[Session]) -> None:
    for bad in (0.0, -0.1, 0.6):
        with pytest.raises(InvalidInput, match=r"band must lie in \(0, 0.5\]"):
            build_query("margin", [RM], values={"band": bad})
    with pytest.raises(InvalidInput, match="band applies to margin mode only"):
        build_query("threshold", [RM], values={"band": 0.1})
    with pytest.raises(InvalidInput, match="min_confidence applies to"):
        build_query("margin", [RM], values={"min_confidence": 0.9})


def test_cli_takes_the_band_as_a_mode_parameter(
    runner: CliRunner, loaded: sessionmaker[Session]
) -> None:
    cli = typer.Typer()
    register(cli)
    args = ["disagreements", "judgebench", "-d", RM, "--mode", "margin"]
    ok = runner.invoke(cli, [*args, "--param", "band=0.05", "--json"])
    assert ok.exit_code == 0, ok.output
    found = json.loads(ok.stdout)
    with loaded() as session:
        want = expected(session, 0.05)
    assert [(i["external_id"], i["score"]) for i in found["items"]] == want
    assert found["band"] == 0.05 and found["mode"] == "margin"
    table = runner.invoke(cli, [*args, "-p", "band=0.05"])
    assert table.exit_code == 0 and table.stdout.startswith(f"{len(want)} item(s), margin mode")
    for extra, message in [
        (["-p", "band=0.7"], "band must lie in (0, 0.5], got 0.7"),
        (["-p", "band=wide"], "band must be a number, got 'wide'"),
        (["--k", "2"], "k applies to consensus mode only"),
        (["-p", "band"], "expected NAME=VALUE"),
    ]:
        bad = runner.invoke(cli, [*args, *extra, "--json"])
        assert bad.exit_code == 2 and message in bad.stderr, bad.output
    assert "margin" in runner.invoke(cli, ["disagreements", "--help"]).stdout


def test_page_form_csv_and_api(client: TestClient, loaded: sessionmaker[Session]) -> None:
    # As the form sends it: a cut left over from threshold mode, empty fields.
    sent = {"mode": "margin", "detector": RM, "band": "0.05", "min_confidence": "0.9", "k": ""}
    with loaded() as session:
        want = expected(session, 0.05)
    page = client.get(PAGE, params=sent, headers=HX)
    assert page.status_code == 200, page.text
    assert re.search(
        r'<input type="number" name="band" id="dq-band" value="0.05" min="0.0" max="0.5" '
        r'step="any" placeholder="0.1">',
        page.text,
    )
    assert 'name="min_confidence"' not in page.text
    assert re.findall(r'<td class="id"><a href="[^"]*">([^<]*)</a>', page.text) == [
        ext for ext, _ in want
    ]
    assert "band=0.05" in page.headers["HX-Push-Url"]
    assert "min_confidence" not in page.headers["HX-Push-Url"]
    export = client.get(f"{PAGE}.csv", params=sent)
    assert 'filename="judgebench-disagreements-margin.csv"' in export.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(export.text)))
    assert [(r["external_id"], float(r["score"])) for r in rows] == want
    api = client.get(f"/api{PAGE}", params=sent).json()
    assert api["band"] == 0.05 and [(i["external_id"], i["score"]) for i in api["items"]] == want
    default = client.get(f"/api{PAGE}", params={"mode": "margin", "detector": RM, "band": ""})
    assert default.json()["band"] == 0.1
    assert client.get(f"/api{PAGE}", params={**sent, "band": "0"}).status_code == 422
    spec = client.get("/openapi.json").json()
    params = {
        p["name"]: p
        for p in spec["paths"]["/api/benchmarks/{name}/disagreements"]["get"]["parameters"]
    }
    assert params["band"]["schema"] == {"type": "number", "exclusiveMinimum": 0.0, "maximum": 0.5}
    assert "margin" in params["mode"]["schema"]["enum"]


def test_review_queue_from_the_margin_list(
    client: TestClient, loaded: sessionmaker[Session]
) -> None:
    query = urlencode({"detector": RM, "mode": "margin", "band": "0.05", "label": "reference"})
    page = client.get(f"{PAGE}?{query}")
    link = re.search(r'<a class="queue-link" href="([^"]*)"', page.text)
    assert link is not None
    form = client.get(link.group(1).replace("&amp;", "&"))
    assert form.status_code == 200
    stored = re.search(r'name="query" value="([^"]*)"', form.text)
    assert stored is not None
    made = client.post(
        "/queues",
        data={
            "benchmark": "judgebench",
            "name": "unsure reward model",
            "label": "reference",
            "source": "disagreements",
            "query": stored.group(1).replace("&amp;", "&"),
            "overlap_k": "1",
        },
        follow_redirects=False,
    )
    assert made.status_code == 303, made.text
    queue_id = int(made.headers["location"].rsplit("/", 1)[1])
    with loaded() as session:
        members = session.execute(
            select(Instance.external_id)
            .join(QueueItem, QueueItem.instance_id == Instance.id)
            .where(QueueItem.queue_id == queue_id)
            .order_by(QueueItem.position)
        ).scalars()
        assert list(members) == [ext for ext, _ in expected(session, 0.05)]
