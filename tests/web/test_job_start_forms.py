"""Every job kind starts from a form; job pages show time; the judge form estimates (issue 21, 10).

On both databases: ``/jobs/new/{kind}`` queues what ``POST /api/jobs/{kind}`` queues, from the
form's text, and refuses a bad value with a 422 beside its field; a running job shows its
elapsed time and an ETA; the judge form defaults to a small sample and estimates its time from
the model's finished judge jobs; each kind describes its job in words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.benchmarks import get_benchmark
from app.services.jobs import queue as job_queue
from app.services.jobs.kinds import all_kinds
from app.services.jobs.timing import duration_text
from app.settings import Settings
from app.tables import Instance, Job, utcnow
from app.web.jobs_pages import JUDGE_FORM_SAMPLE, startable_forms
from tests.support import factories as f
from tests.support.auth_support import api_client
from tests.support.job_targets import CHOICE, MODEL, REQUESTS, seed_job_targets

# Kinds with a form of their own (the judge's per benchmark, the lie probe's on /probes).
OWN_FORMS = {"judge", "fit_lie_probe"}
GENERIC = sorted(set(REQUESTS) - OWN_FORMS)


@pytest.fixture
def client(
    settings: Settings, factory: sessionmaker[Session], tmp_path: Path
) -> Iterator[TestClient]:
    seed_job_targets(factory, tmp_path)
    with api_client(settings) as c:
        yield c


def _as_form(values: dict[str, Any]) -> dict[str, str]:
    """Parameters as a form sends them: text, lists comma-separated."""
    return {k: ",".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in values.items()}


def _jobs(factory: sessionmaker[Session]) -> int:
    with transaction(factory) as s:
        return int(s.scalar(select(func.count()).select_from(Job)) or 0)


def test_the_jobs_page_offers_every_startable_kind(client: TestClient) -> None:
    page = client.get("/jobs")
    assert page.status_code == 200
    offered = {name for name, _, _ in startable_forms()}
    assert offered == set(REQUESTS)  # every kind a user may start, and only those
    for kind in GENERIC:
        assert f'href="/jobs/new/{kind}"' in page.text, kind
    assert 'href="/probes"' in page.text  # the lie probe's own form
    # A choice benchmark's page links to the two jobs that were CLI-only.
    bench = client.get(f"/benchmarks/{CHOICE}")
    assert f'href="/jobs/new/rank_errors?benchmark={CHOICE}"' in bench.text
    assert f'href="/jobs/new/answer_choices?benchmark={CHOICE}"' in bench.text


@pytest.mark.parametrize("kind", GENERIC)
def test_each_kind_starts_from_the_generic_form(
    client: TestClient, factory: sessionmaker[Session], kind: str
) -> None:
    good, bad, field = REQUESTS[kind]
    form = client.get(f"/jobs/new/{kind}", params={"benchmark": good.get("benchmark", "")})
    assert form.status_code == 200
    assert 'data-form="job-start"' in form.text
    for name in good:
        assert f'name="{name}"' in form.text, name
    refused = client.post(f"/jobs/new/{kind}", data=_as_form(bad))
    assert refused.status_code == 422
    assert f'id="error-job-start-{field}"' in refused.text
    assert _jobs(factory) == 0
    posted = client.post(f"/jobs/new/{kind}", data=_as_form(good), follow_redirects=False)
    assert posted.status_code == 303, posted.text
    job = client.get("/api" + posted.headers["location"]).json()
    assert job["kind"] == kind and job["status"] == "queued"
    assert {k: job["params"][k] for k in good} == good


def test_kinds_with_their_own_form_or_unknown_are_not_offered_here(client: TestClient) -> None:
    for kind in ("judge", "fit_lie_probe", "compute_metrics", "import_upload", "nope"):
        assert client.get(f"/jobs/new/{kind}").status_code == 404, kind


def test_a_checkbox_sends_false_when_cleared(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    form = client.get("/jobs/new/answer_choices")
    assert 'type="checkbox" name="capture" value="true" checked' in form.text
    # A cleared box sends only its hidden "false" (a ticked one sends "true" after it).
    data = {"benchmark": CHOICE, "model": MODEL, "capture": "false"}
    posted = client.post("/jobs/new/answer_choices", data=data, follow_redirects=False)
    assert posted.status_code == 303
    assert client.get("/api" + posted.headers["location"]).json()["params"]["capture"] is False


def _running(factory: sessionmaker[Session], started: timedelta, done: int, total: int) -> int:
    with transaction(factory) as s:
        job = job_queue.enqueue(s, "rank_errors", {"benchmark": CHOICE})
        assert job_queue.claim(s, "w", lease_seconds=600, job_id=job.id) is not None
        job_queue.set_progress(s, job.id, "w", done, total)
        s.execute(update(Job).where(Job.id == job.id).values(started_at=utcnow() - started))
        return job.id


def test_a_running_job_shows_elapsed_time_and_an_eta(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    # A quarter done after 100 s: about 300 s left.
    job_id = _running(factory, timedelta(seconds=100), 25, 100)
    page = client.get(f"/jobs/{job_id}")
    found = re.search(r"elapsed (1 min 4[0-9] s), about (\d+ min(?: \d+ s)?) left", page.text)
    assert found, page.text
    assert re.fullmatch(r"5 min( [0-9] s)?", found.group(2))
    listing = client.get("/jobs")
    assert re.search(r"elapsed 1 min 4\d s, about 5 min( \d s)? left", listing.text)
    # Nothing done yet: the elapsed time, no guess at the rest.
    fresh = _running(factory, timedelta(seconds=30), 0, 100)
    text = client.get(f"/jobs/{fresh}").text
    assert "elapsed 3" in text and f"/jobs/{fresh}" in text
    assert "left" not in text.split("job-timing", 1)[1].split("</span>", 1)[0]
    # Finished: how long it took.
    with transaction(factory) as s:
        job_queue.finish(s, job_id, "w", {"rankers": {}})
    assert "took 1 min 4" in client.get(f"/jobs/{job_id}").text


def _finished_judge(factory: sessionmaker[Session], model: str, units: int, seconds: int) -> None:
    with transaction(factory) as s:
        job = job_queue.enqueue(s, "judge", {"benchmark": f.PAIRWISE, "model": model})
        assert job_queue.claim(s, "w", lease_seconds=600, job_id=job.id) is not None
        job_queue.set_progress(s, job.id, "w", units, units)
        job_queue.finish(s, job.id, "w", {})
        now = utcnow()
        s.execute(
            update(Job)
            .where(Job.id == job.id)
            .values(started_at=now - timedelta(seconds=seconds), finished_at=now)
        )


def test_the_judge_form_defaults_to_a_sample_with_an_estimate(
    client: TestClient, factory: sessionmaker[Session]
) -> None:
    form = client.get(f"/benchmarks/{f.PAIRWISE}/judge")
    assert f'name="limit" min="1" placeholder="all" value="{JUDGE_FORM_SAMPLE}"' in form.text
    assert "no estimate yet" in form.text
    # Another model's pace says nothing about this one.
    _finished_judge(factory, "other", 1000, 10)
    assert "no estimate yet" in client.get(f"/benchmarks/{f.PAIRWISE}/judge").text
    _finished_judge(factory, MODEL, 30, 60)  # 0.5 judgments a second
    _finished_judge(factory, MODEL, 10, 20)
    with transaction(factory) as s:
        bench_id = get_benchmark(s, f.PAIRWISE).id
        pairs = s.scalar(
            select(func.count()).select_from(Instance).where(Instance.benchmark_id == bench_id)
        )
    units = min(JUDGE_FORM_SAMPLE, pairs or 0) * 2  # both orders
    text = client.get(f"/benchmarks/{f.PAIRWISE}/judge").text
    expected = f"about {duration_text(timedelta(seconds=units / 0.5))} for {units:,} judgments"
    assert expected in text, text
    assert "over its last 2 judge jobs" in text and "no estimate yet" not in text


@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_each_kind_describes_its_job_in_words(kind: str) -> None:
    good, _, _ = REQUESTS[kind]
    text = all_kinds()[kind].from_dict(good).describe()
    assert text and text[0].isupper()
    # Not a parameter dump: no mapping or list syntax, no key=value, no field names.
    assert not re.search(r"[{}\[\]=]|': ", text), text
    assert "_" not in re.sub(r"\S*[-/:]\S*", "", text), text
