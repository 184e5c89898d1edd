"""A queue's "before you accept" comparison: loaded apart from the queue page, never for big data.

The queue page does work proportional to the queue: it computes no metrics. The comparison
(metrics on the original vs the resolved labels, over the whole benchmark) is its own
fragment: computed once per data version for a benchmark within the metrics page's inline
limit, and for a bigger one not computed at all but linked to the metrics page, which
computes both sides as jobs.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.main import create_app
from app.services.metrics.metrics_compare import MetricsComparison, compare_metrics
from app.services.review import review_views
from app.settings import Settings
from app.web.templating import fmt_ci, fmt_number
from tests.support import factories as f
from tests.support.auth_support import browser_session

HX = {"HX-Request": "true"}
_OPEN = ExitStack()


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    _OPEN.close()
    review_views.COMPARISON_CACHE.clear()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Benchmarks the web process compares (each call of ``compare_metrics``), in order."""
    seen: list[str] = []

    def counting(session: Session, benchmark: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(benchmark)
        return compare_metrics(session, benchmark, *args, **kwargs)

    monkeypatch.setattr(review_views, "compare_metrics", counting)
    review_views.COMPARISON_CACHE.clear()
    return seen


def _login(settings: Settings, name: str, role: str) -> tuple[TestClient, str]:
    client = _OPEN.enter_context(TestClient(create_app(settings)))
    return client, browser_session(client, settings, name, role)


def _queue(client: TestClient, csrf: str) -> int:
    data = {
        "csrf_token": csrf, "benchmark": f.PAIRWISE, "name": "all pairs", "label": "reference",
        "source": "filter", "query": "", "overlap_k": "1", "blind": "false",
    }  # fmt: skip
    r = client.post("/queues", data=data, follow_redirects=False)
    assert r.status_code == 303, r.text
    return int(r.headers["location"].rsplit("/", 1)[1])


def _section(page: str) -> str:
    found = re.search(r'<section class="before-accept".*?</section>', page, re.S)
    assert found is not None
    return found.group(0)


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _expected_rows(comparison: MetricsComparison) -> list[str]:
    """Each detector's row as text: name, changed items, then original and resolved values."""
    rows = []
    for d in comparison.detectors:
        cells = [d.detector, fmt_number(d.changed)]
        for name in ("auroc", "brier"):
            for row in (d.original[0], d.resolved[0]):
                value, ci = row.values[name], row.intervals.get(name)
                cells.append("n/a" if value is None else f"{fmt_number(value)} {fmt_ci(ci)}")
        rows.append(" ".join(cells))
    return rows


def test_the_queue_page_computes_no_metrics_and_loads_them_after(
    factory: sessionmaker[Session], settings: Settings, calls: list[str]
) -> None:
    f.seed_benchmarks(factory)
    rita, rcsrf = _login(settings, "rita", "reviewer")
    qid = _queue(rita, rcsrf)
    page = rita.get(f"/queues/{qid}")
    assert page.status_code == 200 and calls == []
    placeholder = _section(page.text)
    assert f'hx-get="/queues/{qid}/comparison"' in placeholder
    assert 'hx-trigger="load"' in placeholder
    assert f'href="/queues/{qid}/comparison"' in placeholder  # without JavaScript
    # The fragment: the comparison as the page showed it before, computed once per version.
    fragment = rita.get(f"/queues/{qid}/comparison", headers=HX)
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert calls == [f.PAIRWISE]
    with transaction(factory) as session:
        direct = compare_metrics(session, f.PAIRWISE, "reference", k=1, resamples=500)
    assert direct.detectors
    rows = re.findall(r"<tr><td>.*?</tr>", _section(fragment.text), re.S)
    assert [_text(r) for r in rows] == _expected_rows(direct)
    assert f"0 items of {f.PAIRWISE} change label" in _text(fragment.text)
    # Without htmx it is a page of its own with the same section.
    full = rita.get(f"/queues/{qid}/comparison")
    assert "<html" in full.text and _section(full.text) == _section(fragment.text)
    assert calls == [f.PAIRWISE]
    # A vote bumps the data version: the next request compares again, and shows the change.
    ann, acsrf = _login(settings, "ann", "annotator")
    item = ann.get(f"/queues/{qid}/next")
    iid = int(str(item.url).rsplit("/", 1)[1])
    version = re.search(r'name="version" value="(\d+)"', item.text)
    assert version is not None
    state = rita.get(f"/api/queues/{qid}/items/{iid}").json()
    flipped = "B" if state["original"] == "A" else "A"
    voted = ann.post(
        f"/queues/{qid}/items/{iid}/vote",
        data={"csrf_token": acsrf, "value": flipped, "version": version.group(1)},
        follow_redirects=False,
    )
    assert voted.status_code == 303
    again = rita.get(f"/queues/{qid}/comparison", headers=HX)
    assert calls == [f.PAIRWISE, f.PAIRWISE]
    assert f"1 item of {f.PAIRWISE} change label" in _text(again.text)
    # The comparison is for reviewers, as on the queue page.
    assert ann.get(f"/queues/{qid}/comparison").status_code == 403
    assert "before-accept" not in ann.get(f"/queues/{qid}").text


def test_a_big_benchmark_is_linked_to_the_metrics_page_not_computed(
    factory: sessionmaker[Session], settings: Settings, calls: list[str]
) -> None:
    f.seed_benchmarks(factory)
    small_limit = settings.model_copy(update={"metrics_inline_items": 2})
    rita, rcsrf = _login(small_limit, "rita", "reviewer")
    qid = _queue(rita, rcsrf)
    assert rita.get(f"/queues/{qid}").status_code == 200
    fragment = rita.get(f"/queues/{qid}/comparison", headers=HX)
    assert fragment.status_code == 200
    assert calls == []
    text = _text(fragment.text)
    labelled = sum(1 for p in f.PAIRS if p.reference)
    assert f"{f.PAIRWISE} has {labelled} labelled items, more than the 2" in text
    links = dict(re.findall(r'<a class="compare-(\w+)" href="([^"]+)"', fragment.text))
    assert set(links) == {"original", "resolved"}
    for mode, href in links.items():
        url = html.unescape(href)
        assert url.startswith(f"/benchmarks/{f.PAIRWISE}/metrics?")
        assert "label=reference" in url and "k=1" in url and f"labels={mode}" in url
        # The metrics page takes it from there (a job for a benchmark this size).
        assert rita.get(url).status_code == 200
    assert calls == []


def test_too_few_groups_are_said_not_shown_as_an_interval(
    factory: sessionmaker[Session], settings: Settings, calls: list[str]
) -> None:
    # Issue 21 item 9 on the binary "before you accept": more groups asked for than the
    # benchmark has, so each side's interval is withheld and the section says why.
    f.seed_benchmarks(factory)
    strict = settings.model_copy(update={"min_interval_groups": 100_000})
    rita, rcsrf = _login(strict, "rita", "reviewer")
    fragment = rita.get(f"/queues/{_queue(rita, rcsrf)}/comparison", headers=HX)
    assert fragment.status_code == 200 and calls == [f.PAIRWISE]
    section = _section(fragment.text)
    assert "too few groups for an interval" in section
    assert not re.search(r'<span class="ci">\[', section)
