"""The disagreements page's form, CSV and API on the bundled JudgeBench data, both dialects.

The form sends its empty fields and the other modes' leftovers; the page, the CSV, the API
and queue sources treat them as unset. The form shows the chosen mode's declared parameters;
failed htmx requests get a readable error fragment.
"""

from __future__ import annotations

import csv
import io
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.disagreements import modes as disagreement_modes
from app.services.disagreements.disagreement_query import build_query, mode_param_names
from app.services.disagreements.lists import disagreements, find_disagreements
from app.services.disagreements.modes import inputs
from app.services.disagreements.modes.base import DetectorKind, DisagreementMode, ParamKind
from app.services.evidence.benchmarks import bump_data_version
from app.services.review.queue_sources import disagreement_ids
from app.tables import Benchmark, Detector, Instance, Judgment
from app.web.disagreement_pages import PAGE_ROWS
from tests.disagreements.test_disagreements_judge import client, loaded
from tests.ingest.test_helpers import O1_MINI_JUDGE
from tests.support.paging_support import every_page

__all__ = ["client", "loaded"]  # shared fixtures: JudgeBench GPT-4o pairs, o1-mini, 3 RMs

HX = {"HX-Request": "true"}
PAGE = "/benchmarks/judgebench/disagreements"
API = "/api/benchmarks/judgebench/disagreements"
REWARDS = [
    "reward_model/Skywork_Skywork-Reward-Gemma-2-27B",
    "reward_model/Skywork_Skywork-Reward-Llama-3.1-8B",
    "reward_model/internlm_internlm2-7b-reward",
]
REWARD = REWARDS[0]
# Every field of the form for every mode, left empty: what a submit sends before any typing.
EMPTY = dict.fromkeys([*mode_param_names(), "limit"], "")


def row_ids(page: str) -> list[str]:
    return re.findall(r'<td class="id"><a href="[^"]*">([^<]*)</a>', page)


def listed_ids(client: TestClient, page: str) -> list[str]:
    """The ids of every row of the list, page after page."""
    return [i for shown in every_page(client, page) for i in row_ids(shown)]


def field_names(page: str) -> set[str]:
    form = re.search(r'<form id="disagreement-filters".*?</form>', page, re.S)
    assert form is not None
    return set(re.findall(r'<(?:input|select)[^>]* name="([^"]+)"', form.group(0)))


def form_choices(mode: DisagreementMode) -> tuple[list[str], dict[str, str]]:
    """What a user picks in the form for ``mode`` on this data: detector(s), and judges."""
    if mode.detectors.kind is DetectorKind.JUDGE:
        detectors = [O1_MINI_JUDGE]
    else:
        detectors = REWARDS if mode.detectors.many else [REWARD]
    judges = {p.name: O1_MINI_JUDGE for p in mode.params if p.kind is ParamKind.JUDGE}
    return detectors, judges


# The modes JudgeBench (pairwise) offers; label-errors lists choice and answer items.
MODES = [m for m in disagreement_modes.all_modes() if m.applies_to("pairwise")]


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_form_submit_with_empty_fields_lists_what_the_service_lists(
    client: TestClient, loaded: sessionmaker[Session], mode: DisagreementMode
) -> None:
    detectors, judges = form_choices(mode)
    sent = {**EMPTY, "mode": mode.name, "detector": detectors, **judges}
    with loaded() as session:
        query = build_query(mode.name, detectors, limit=1000, values=judges)
        want = find_disagreements(session, "judgebench", query).as_dict()
    assert want["items"], "the bundled data has disagreements in every mode"
    page = client.get(PAGE, params=sent, headers=HX)
    assert page.status_code == 200, page.text
    assert listed_ids(client, page.text) == [i["external_id"] for i in want["items"]]
    # The pushed URL leaves out the blanks; reloading it gives the same list.
    pushed = page.headers["HX-Push-Url"]
    assert "=&" not in pushed + "&" and not pushed.endswith("=")
    assert row_ids(client.get(pushed).text) == row_ids(page.text)
    export = client.get(f"{PAGE}.csv", params=sent)
    assert export.status_code == 200
    rows = list(csv.DictReader(io.StringIO(export.text)))
    assert [r["external_id"] for r in rows] == [i["external_id"] for i in want["items"]]
    api = client.get(API, params=sent)
    assert api.status_code == 200 and api.json() == want


def test_threshold_with_a_leftover_k_lists_rows(
    client: TestClient, loaded: sessionmaker[Session]
) -> None:
    # The form switched from consensus (k filled) to threshold: k is not threshold's.
    sent = {**EMPTY, "mode": "threshold", "detector": REWARD, "k": "2"}
    with loaded() as session:
        want = disagreements(session, "judgebench", [REWARD], limit=1000).as_dict()
    page = client.get(PAGE, params=sent, headers=HX)
    assert page.status_code == 200 and listed_ids(client, page.text) == [
        i["external_id"] for i in want["items"]
    ]
    assert "k" not in parse_qs(urlsplit(page.headers["HX-Push-Url"]).query)
    assert "k" not in field_names(page.text)
    api = client.get(API, params=sent)
    assert api.status_code == 200 and api.json() == want and api.json()["k"] is None
    assert client.get(f"{PAGE}.csv", params=sent).status_code == 200


def test_form_fields_follow_the_declared_parameters(client: TestClient) -> None:
    common = {"mode", "detector", "label", "limit"}
    for mode in disagreement_modes.all_modes():
        page = client.get(PAGE, params={"mode": mode.name}, headers=HX)
        assert page.status_code == 200
        assert page.text.lstrip().startswith('<div id="disagreement-view">')
        assert field_names(page.text) == common | {p.name for p in mode.params}, mode.name
        assert str(escape(mode.help)) in page.text
    consensus = client.get(PAGE, params={"mode": "consensus"}, headers=HX).text
    assert re.search(r'<select name="detector" id="dq-detector" multiple', consensus)
    assert 'name="k" id="dq-k" value="" min="1" step="1" placeholder="all"' in consensus
    threshold = client.get(PAGE, params={"mode": "threshold", "min_confidence": "0.9"}).text
    assert 'name="min_confidence" id="dq-min_confidence" value="0.9" min="0.0" max="1.0"' in (
        threshold
    )
    assert not re.search(r'<select name="detector"[^>]* multiple', threshold)


def test_detector_choices_follow_the_mode(
    client: TestClient, loaded: sessionmaker[Session]
) -> None:
    def options(page: str) -> list[str]:
        select_ = re.search(r'<select name="detector".*?</select>', page, re.S)
        assert select_ is not None
        return re.findall(r'<option value="([^"]*)"', select_.group(0))

    # A judge with AB calls only: it judged, but has no two-order score.
    with transaction(loaded) as session:
        one = Detector(name="one-order", kind="judge")
        session.add(one)
        session.flush()
        first = session.scalar(select(Instance.id).order_by(Instance.id).limit(1))
        session.add(Judgment(instance_id=first, detector_id=one.id, order="AB", choice="A"))
        bump_data_version(session, session.scalars(select(Benchmark)).one())
    scored = client.get(PAGE, params={"mode": "threshold"}).text
    # o1-mini judged both orders, so it scores the pairs (P(A better)) beside the reward models.
    assert options(scored) == ["", O1_MINI_JUDGE, *sorted(REWARDS)]
    # The reward models' files hold verdicts too, so they are judges as well.
    judges = client.get(PAGE, params={"mode": "judge-orders"}).text
    assert options(judges)[:2] == ["", O1_MINI_JUDGE] and set(options(judges)) > set(REWARDS)
    assert "one-order" in options(judges)
    # A judge left selected when switching to a scored mode is left out, not an error.
    switched = client.get(PAGE, params={"mode": "threshold", "detector": "one-order"}, headers=HX)
    assert switched.status_code == 200
    assert "Left out (this mode does not take them): one-order" in switched.text
    assert "Choose a detector" in switched.text and not row_ids(switched.text)
    # Several detectors left from consensus: a one-detector mode keeps the first.
    trimmed = client.get(PAGE, params={"mode": "threshold", "detector": REWARDS}, headers=HX)
    assert trimmed.status_code == 200 and row_ids(trimmed.text)
    assert f"{REWARD} against" in trimmed.text
    # An unknown name is not silently dropped: the page says it does not exist.
    assert client.get(PAGE, params={"detector": "ghost"}).status_code == 404


def test_bad_values_are_422_naming_the_parameter(client: TestClient) -> None:
    bad = client.get(PAGE, params={"detector": REWARD, "min_confidence": "2"}, headers=HX)
    assert bad.status_code == 422
    assert bad.text.lstrip().startswith('<section id="results" class="error-box"')
    assert "min_confidence must lie in [0, 1], got 2.0" in bad.text
    api = client.get(API, params={"detector": REWARD, "min_confidence": "x"})
    assert api.status_code == 422
    assert "min_confidence must be a number" in api.json()["detail"][0]["msg"]


def test_openapi_documents_parameters_and_the_response(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    op = spec["paths"][API.replace("judgebench", "{name}")]["get"]
    params = {p["name"]: p for p in op["parameters"]}
    assert set(params) >= {"name", "detector", "label", "mode", "positive", "limit"}
    for mode in disagreement_modes.all_modes():
        assert mode.name in params["mode"]["schema"]["enum"]
        for p in mode.params:
            assert mode.name in params[p.name]["description"]
    assert params["min_confidence"]["schema"] == {"type": "number", "minimum": 0.0, "maximum": 1.0}
    ref = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    model = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert set(model["properties"]) >= {"benchmark", "mode", "detectors", "total", "items", "k"}


def test_queue_source_parses_the_page_query(loaded: sessionmaker[Session]) -> None:
    with loaded() as session:
        bench = session.scalar(select(Benchmark).where(Benchmark.name == "judgebench"))
        assert bench is not None
        want = disagreements(session, "judgebench", [REWARD], min_confidence=0.9, limit=200)
        query = f"detector={REWARD}&mode=threshold&min_confidence=0.9&k=3&judge=&limit="
        ids, label = disagreement_ids(session, bench, query)
    assert want.items and ids == [d.instance_id for d in want.items] and label == "reference"


def test_instance_info_reads_any_number_of_ids(
    loaded: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    with loaded() as session:
        bench = session.scalar(select(Benchmark).where(Benchmark.name == "judgebench"))
        assert bench is not None
        whole = disagreements(session, "judgebench", [O1_MINI_JUDGE], mode="judge-orders")
        # More ids than PostgreSQL takes bound parameters in one statement.
        ids = [*range(-70_000, 0), *(d.instance_id for d in whole.items)]
        info = inputs.instance_info(session, bench, ids, "reference")
        assert {iid for iid in info} == {d.instance_id for d in whole.items}
        monkeypatch.setattr(inputs, "ID_CHUNK", 7)
        chunked = disagreements(session, "judgebench", [O1_MINI_JUDGE], mode="judge-orders")
    assert len(whole.items) == 110 and chunked.as_dict() == whole.as_dict()


def test_the_list_is_shown_a_page_at_a_time(client: TestClient) -> None:
    # o1-mini's flipped pairs on the bundled JudgeBench: 110, more than a page.
    sent = {"mode": "judge-orders", "detector": O1_MINI_JUDGE}
    first = client.get(PAGE, params=sent)
    assert first.status_code == 200
    pages = every_page(client, first.text)
    assert [len(row_ids(p)) for p in pages] == [PAGE_ROWS, 110 - PAGE_ROWS]
    assert "page 1 of 2" in pages[0] and "page 2 of 2" in pages[1]
    assert "rows 101\u2013110" in pages[1]
    # Numbering goes on from the previous page.
    assert '<td class="num muted">101</td>' in pages[1]
    # Past the end: the page says so and links back; a page below 1 is refused.
    beyond = client.get(PAGE, params={**sent, "page": "7"})
    assert beyond.status_code == 200 and "No items on page 7: the list has 2 pages" in beyond.text
    assert client.get(PAGE, params={**sent, "page": "0"}).status_code == 422
