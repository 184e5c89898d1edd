"""Review of choice and answer items: options by key, outcomes, taxonomy tags, typed answers.

Also what an item reviewed as unanswerable does to the metrics and the corrected export.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.export.benchmark import changelog_path, export_benchmark
from app.ingest.mmlu_redux import import_mmlu_redux
from app.ingest.table import import_table
from app.main import create_app
from app.services.evidence.answer_matrix import load_answers
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.outcomes import UNANSWERABLE
from app.services.metrics.answer_metrics import answer_report
from app.services.metrics.metrics_query import MetricsQuery
from app.services.metrics.report import metrics_report
from app.services.review.review_views import REVIEW_RESAMPLES
from app.settings import Settings
from app.tables import Instance
from tests.conftest import DATA
from tests.support.auth_support import browser_session

SUBJECT = DATA / "mmlu-redux" / "astronomy.csv"


def _client(settings: Settings, name: str, role: str) -> tuple[TestClient, str]:
    client = TestClient(create_app(settings))
    client.__enter__()
    return client, browser_session(client, settings, name, role)


def _queue(client: TestClient, csrf: str, benchmark: str, query: str = "") -> int:
    data = {
        "csrf_token": csrf, "benchmark": benchmark, "name": "check labels", "label": "reference",
        "source": "filter", "query": query, "overlap_k": "1", "blind": "true",
    }  # fmt: skip
    r = client.post("/queues", data=data, follow_redirects=False)
    assert r.status_code == 303, r.text
    return int(r.headers["location"].rsplit("/", 1)[1])


def _item(client: TestClient, queue_id: int) -> tuple[int, int, str]:
    page = client.get(f"/queues/{queue_id}/next")
    assert page.status_code == 200, page.text
    iid = int(str(page.url).rsplit("/", 1)[1].split("?")[0])
    version = re.search(r'name="version" value="(\d+)"', page.text)
    assert version is not None
    return iid, int(version.group(1)), page.text


def _post(client: TestClient, url: str, csrf: str, **data: Any) -> Any:
    return client.post(url, data={"csrf_token": csrf, **data}, follow_redirects=False)


@pytest.fixture
def mmlu(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    with transaction(factory) as s:
        import_mmlu_redux(s, [SUBJECT], "mmlu")
    return factory


def test_a_choice_item_is_voted_by_option_and_adjudicated_unanswerable(
    mmlu: sessionmaker[Session], settings: Settings, tmp_path: Path
) -> None:
    reviewer, rcsrf = _client(settings, "rita", "reviewer")
    annotator, acsrf = _client(settings, "ann", "annotator")
    queue_id = _queue(reviewer, rcsrf, "mmlu", "q=astronomy:1")
    iid, version, page = _item(annotator, queue_id)
    # Options by key 1-4, then the outcomes; the options show in a blind queue.
    keys = re.findall(r'data-key="(\d)" class="choice"><kbd>\d</kbd> ([^<]+)</button>', page)
    assert [v for _, v in keys] == ["A", "B", "C", "D", *UNANSWERABLE]
    assert page.count('<li><span class="letter">') == 4
    assert "multiple correct answers" in page and "needs expertise" in page
    vote = _post(
        annotator, f"/queues/{queue_id}/items/{iid}/vote", acsrf, value="B", version=version
    )
    assert vote.status_code == 303, vote.text
    # A typed value is not an option of a choice queue.
    refused = _post(
        annotator, f"/queues/{queue_id}/items/{iid}/vote", acsrf, typed="E", version=version + 1
    )
    assert refused.status_code in (400, 422) and "is not one of" in refused.text
    state = reviewer.get(f"/api/queues/{queue_id}/items/{iid}").json()
    adjudicated = _post(
        reviewer, f"/queues/{queue_id}/items/{iid}/adjudicate", rcsrf,
        value="no correct option", version=state["version"], reason="none of the four is right",
        tags=["no correct answer"],
    )  # fmt: skip
    assert adjudicated.status_code == 303, adjudicated.text
    report = reviewer.get("/benchmarks/mmlu/report")
    assert report.status_code == 200 and "no correct answer" in report.text
    with mmlu() as s:
        # The queue holds every id containing "astronomy:1"; the next item is any of them.
        ext = s.get_one(Instance, iid).external_id
        out = tmp_path / "mmlu.jsonl"
        summary = export_benchmark(s, "mmlu", out)
        original = metrics_report(s, "mmlu", "reference", resamples=50)
        resolved = metrics_report(s, "mmlu", "reference", resamples=50, labels="resolved")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary.excluded == 1 and len(rows) == 99
    assert ext not in {r["external_id"] for r in rows}
    with changelog_path(out).open(newline="") as fh:
        changes = [c for c in csv.DictReader(fh) if c["external_id"] == ext]
    assert [(c["label"], c["resolved"], c["rule"]) for c in changes] == [
        ("reference", "no correct option", "adjudication")
    ]
    assert json.loads(changes[0]["tags"]) == ["no correct answer"]
    # The unanswerable item leaves the answer metrics of the resolved labels.
    n = {r["detector"]: r["n"] for r in original["rows"]}
    assert all(r["n"] == n[r["detector"]] - 1 for r in resolved["rows"])


def test_an_answer_queue_takes_typed_answers(
    factory: sessionmaker[Session], settings: Settings, tmp_path: Path
) -> None:
    path = tmp_path / "arith.csv"
    path.write_text("question,gold,m1\n2 + 2?,5,4\n3 * 3?,9,9\n", encoding="utf-8")
    with transaction(factory) as s:
        import_table(
            s, path, "answer", labels={"reference": "gold"}, answers={"m1": "m1"},
            grader="numeric",
        )  # fmt: skip
    reviewer, rcsrf = _client(settings, "rita", "reviewer")
    queue_id = _queue(reviewer, rcsrf, "arith")
    iid, version, page = _item(reviewer, queue_id)
    keys = re.findall(r'data-key="(\d)" class="choice"><kbd>\d</kbd> ([^<]+)</button>', page)
    assert [v for _, v in keys] == list(UNANSWERABLE)
    assert 'name="typed"' in page
    # Enter in the text box submits the (first, empty) default button and the typed answer.
    typed = _post(
        reviewer, f"/queues/{queue_id}/items/{iid}/vote", rcsrf, value="", typed=" 4 ",
        version=version,
    )  # fmt: skip
    assert typed.status_code == 303, typed.text
    state = reviewer.get(f"/api/queues/{queue_id}/items/{iid}").json()
    assert state["own_vote"] == "4"


def test_before_you_accept_compares_the_models_answers_on_a_choice_benchmark(
    mmlu: sessionmaker[Session], settings: Settings
) -> None:
    """Issue 21 item 1: the section showed "not a known binary vocabulary" on MMLU-Redux."""
    reviewer, rcsrf = _client(settings, "rita", "reviewer")
    annotator, acsrf = _client(settings, "ann", "annotator")
    queue_id = _queue(reviewer, rcsrf, "mmlu", "q=astronomy:1")
    iid, version, _ = _item(annotator, queue_id)
    with mmlu() as s:
        inst = s.get_one(Instance, iid)
        matrix = load_answers(s, get_benchmark(s, "mmlu"))
        original = matrix.labels[matrix.external_ids.index(inst.external_id)]
        n_options = len(inst.payload["options"])
    other = next(letter for letter in "ABCD"[:n_options] if letter != original)
    vote = _post(
        annotator, f"/queues/{queue_id}/items/{iid}/vote", acsrf, value=other, version=version
    )
    assert vote.status_code == 303, vote.text
    for url in (f"/queues/{queue_id}/comparison", f"/queues/{queue_id}", "/benchmarks/mmlu/report"):
        page = reviewer.get(url)
        assert page.status_code == 200, page.text
        assert "binary vocabulary" not in page.text and "positive class" not in page.text.lower()
    section = reviewer.get(f"/queues/{queue_id}/comparison").text
    assert "1 item of mmlu change label under review" in section
    with mmlu() as s:
        query = MetricsQuery("mmlu", resamples=REVIEW_RESAMPLES, labels="resolved", k=1)
        resolved = {r["detector"]: r for r in answer_report(s, query)["rows"] if r["slice"] is None}
    table = section.split('class="grid compare answers"')[1].split("</table>")[0]
    # Each model's row: its name, then the first number of each cell (original, resolved, ...).
    rows = {
        row.split("</td>")[0]: [float(v) for v in re.findall(r"<td>(-?[0-9.]+)", row)]
        for row in table.split("<tr><td>")[1:]
    }
    assert set(rows) == set(resolved)
    for model, values in rows.items():
        assert values[1] == pytest.approx(resolved[model]["answer_accuracy"], abs=5e-4)
    # One vote resolves with k = 1 (the queue's overlap); the report takes k from its form.
    report = reviewer.get("/benchmarks/mmlu/report", params={"k": 1}).text
    assert 'class="answer-comparison"' in report and "Macro-F1 resolved" in report
