"""Every job kind, whole in one module: typed parameters checked when built, a handler, words.

The parameters are built before anything is queued, so a bad value is an ``InvalidInput``
naming its field and the store is unchanged; the worker reads the same class back from the
row; the jobs pages describe a job in words and link to what it produced.
"""

from __future__ import annotations

from typing import Any

import pytest
from markupsafe import escape
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput, NotFound
from app.services.jobs import queue as job_queue
from app.services.jobs.judge import JudgeParams
from app.services.jobs.kind import JobParams, create, enqueue
from app.services.jobs.kinds import all_kinds, describe_job, job_links, params_of
from app.settings import Settings
from app.tables import Job
from tests.support.auth_support import api_client
from tests.support.job_targets import MODEL, REQUESTS

KINDS = sorted(all_kinds())


def test_every_kind_has_a_request_table_entry_and_a_handler() -> None:
    from workers.dispatch import all_handlers

    assert sorted(REQUESTS) == sorted(k for k in KINDS if all_kinds()[k].startable)
    assert sorted(all_handlers()) == KINDS
    assert "compute_metrics" in KINDS and not all_kinds()["compute_metrics"].startable


def test_a_kind_without_a_handler_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers import dispatch

    monkeypatch.setattr(dispatch, "registered_handlers", lambda: {})
    with pytest.raises(RuntimeError, match="without a handler"):
        dispatch.all_handlers()


@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_parameters_round_trip_through_the_job_row(kind: str) -> None:
    params = all_kinds()[kind].from_dict(REQUESTS[kind][0])
    again = all_kinds()[kind].from_dict(params.as_dict())
    assert again == params
    assert again.as_dict() == params.as_dict()


@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_a_bad_value_is_refused_when_built_naming_its_field(kind: str) -> None:
    _good, bad, field = REQUESTS[kind]
    cls = all_kinds()[kind]
    if kind == "apply_probe":  # a probe that is not frozen: only the store knows
        cls.from_dict(bad)
        return
    with pytest.raises(InvalidInput) as caught:
        cls.from_dict(bad)
    assert caught.value.field == field


def test_unknown_and_missing_parameters_are_named() -> None:
    with pytest.raises(InvalidInput) as unknown:
        JudgeParams.from_dict({"benchmark": "b", "model": "m", "temperature": 1})
    assert unknown.value.field == "params" and "temperature" in unknown.value.reason
    with pytest.raises(InvalidInput) as missing:
        JudgeParams.from_dict({"benchmark": "b"})
    assert missing.value.field == "model"


def test_form_text_is_parsed_by_the_fields_types() -> None:
    form = {"limit": " ", "seed": "7", "orders": "AB, BA", "capture": "on", "csrf_token": "x"}
    assert JudgeParams.parse_form(form) == {
        "limit": None,
        "seed": 7,
        "orders": ["AB", "BA"],
        "capture": True,
    }
    with pytest.raises(InvalidInput) as caught:
        JudgeParams.parse_form({"batch_size": "four"})
    assert caught.value.field == "batch_size" and "four" in caught.value.reason


@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_a_store_check_or_a_bad_value_queues_nothing(
    targets: sessionmaker[Session], kind: str
) -> None:
    good, bad, field = REQUESTS[kind]
    cls = all_kinds()[kind]
    with transaction(targets) as s:
        params = create(s, cls, good)
        job = enqueue(s, params)
        assert (job.kind, job.params) == (kind, params.as_dict())
    with pytest.raises(InvalidInput) as caught, transaction(targets) as s:
        enqueue(s, create(s, cls, bad))
    assert caught.value.field == field
    if "benchmark" in good:
        with pytest.raises(NotFound), transaction(targets) as s:
            enqueue(s, create(s, cls, {**good, "benchmark": "no-such-benchmark"}))
    with transaction(targets) as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 1


def test_a_judge_without_a_mode_takes_the_models(targets: sessionmaker[Session]) -> None:
    with transaction(targets) as s:
        params = create(s, JudgeParams, {"benchmark": "jb-mini", "model": MODEL})
    assert (params.mode, params.judge) == ("forced", f"{MODEL}/forced")


@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_a_job_is_described_in_words(targets: sessionmaker[Session], kind: str) -> None:
    with transaction(targets) as s:
        job = enqueue(s, create(s, all_kinds()[kind], REQUESTS[kind][0]))
        text = describe_job(job)
    assert text and text[0].isupper()
    # Words, not a parameter dump: no "key=value" and no dict or list syntax.
    assert "=" not in text and "{" not in text and "[" not in text, text


def _finished(factory: sessionmaker[Session], kind: str, result: dict[str, Any]) -> Job:
    with transaction(factory) as s:
        job = enqueue(s, create(s, all_kinds()[kind], REQUESTS[kind][0]))
        claim = job_queue.claim(s, "w", lease_seconds=60, job_id=job.id)
        assert claim is not None
        job_queue.finish(s, job.id, "w", result)
        s.flush()
        s.refresh(job)
        s.expunge(job)
        return job


# A judge job that kept pairs in both orders links to its flip labels' metrics; that link is
# followed in the browser after a real judge job (tests/browser/test_forms.py).
RESULTS: dict[str, dict[str, Any]] = {}


@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_a_finished_jobs_links_open_pages(
    settings: Settings, targets: sessionmaker[Session], kind: str
) -> None:
    job = _finished(targets, kind, RESULTS.get(kind, {}))
    params = params_of(job)
    assert isinstance(params, JobParams)
    links = job_links(job)
    with api_client(settings) as client:
        page = client.get(f"/jobs/{job.id}")
        assert page.status_code == 200
        for link in links:
            assert str(escape(link.text)) in page.text
        hrefs = [h for h in _hrefs(page.text) if h.startswith(("/benchmarks/", "/probes"))]
        assert len(hrefs) >= len(links)
        for href in hrefs:
            assert client.get(href).status_code == 200, href


def _hrefs(html: str) -> list[str]:
    import re

    section = html.split('class="job-output"', 1)[-1].split("</section>", 1)[0]
    return [h.replace("&amp;", "&") for h in re.findall(r'href="([^"]+)"', section)]


def test_a_running_or_unreadable_job_has_no_links(targets: sessionmaker[Session]) -> None:
    with transaction(targets) as s:
        job = job_queue.enqueue(s, "judge", {"benchmark": "jb-mini", "orders": "sideways"})
        assert params_of(job) is None and job_links(job) == []
        assert describe_job(job) == "judge"


def test_the_jobs_page_lists_each_job_in_words(
    settings: Settings, targets: sessionmaker[Session]
) -> None:
    with transaction(targets) as s:
        for kind, (good, _bad, _field) in REQUESTS.items():
            enqueue(s, create(s, all_kinds()[kind], good))
    with api_client(settings) as client:
        text = client.get("/jobs").text
    assert "Judge jb-mini with smol (forced) as smol/forced, orders AB and BA" in text
    assert "Rank label errors of choice-mini (consensus; trained on defect)" in text
    assert "benchmark=" not in text


def test_every_startable_kind_has_an_api_route(settings: Settings) -> None:
    # The app queues compute_metrics itself: no route starts it.
    with api_client(settings) as client:
        routes = set(client.get("/openapi.json").json()["paths"])
    for kind, cls in all_kinds().items():
        assert (f"/api/jobs/{kind}" in routes) == cls.startable, kind
