"""Every link reachable from the landing page answers, and no page logs a console error.

A crawl over a demo store with one benchmark of each kind the demo holds (JudgeBench pairs with
judge outputs, a statement set, a role-play lie set, MMLU-Redux subjects with their rankers),
as an admin and as an annotator. Links are followed breadth-first from ``/``; each distinct
page shape (the path with its numbers and ids folded, and its query's parameter names) is
visited in the browser a few times, so a list of 600 instances costs three visits, not 600.
The links of every visited page are requested (status only), a few of each shape, so a dead
link on a visited page is found even when its shape is not visited again; downloads and API
answers are requested, not visited.
"""

from __future__ import annotations

import contextlib
import re
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urljoin, urlsplit

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from sqlalchemy import select

from app.cli.demo import load_demo_data
from app.db import transaction
from app.services.evidence.benchmarks import get_benchmark
from app.services.review import queues
from app.settings import BUNDLED_DATA, Settings
from app.store import Store
from app.tables import Instance, TokenKind
from tests.browser.test_pages import browser
from tests.browser.test_review import _watch
from tests.support.auth_support import PASSWORD, ensure_user, token_for
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]

VISITS_PER_SHAPE = 1
# Links of one shape are checked a few at a time: a broken link is broken for its whole shape
# (the 14 dead model links of issue 21 were one route given a kind of name it did not serve).
CHECKS_PER_SHAPE = 4
MAX_VISITS = 120
# Files the browser would download, not show: their links are checked, not visited.
DOWNLOAD = re.compile(r"\.(csv|jsonl|json|parquet|zip|md)(\?|$)|/export\b")
# Links that act rather than show (sign-out ends the session the crawl runs in).
SKIP = re.compile(r"^/(logout|signout|sign-out)\b")


def _demo_subset(root: Path) -> Path:
    """A data folder shaped like the bundled one, with fewer files (links to the real ones)."""
    jb = root / "judgebench"
    (jb / "outputs").mkdir(parents=True)
    for path in (BUNDLED_DATA / "judgebench").glob("*gpt-4o*.jsonl"):
        (jb / path.name).symlink_to(path)
    for path in (BUNDLED_DATA / "judgebench" / "outputs").glob("*.jsonl"):
        (jb / "outputs" / path.name).symlink_to(path)
    truth = root / "truth"
    (truth / "real_world_scenarios").mkdir(parents=True)
    (truth / "cities.csv").symlink_to(BUNDLED_DATA / "truth" / "cities.csv")
    scenarios = BUNDLED_DATA / "truth" / "real_world_scenarios" / "all_unambiguous_replies.csv"
    (truth / "real_world_scenarios" / scenarios.name).symlink_to(scenarios)
    mmlu = root / "mmlu-redux"
    mmlu.mkdir()
    for subject in ("astronomy", "college_physics", "management"):
        (mmlu / f"{subject}.csv").symlink_to(BUNDLED_DATA / "mmlu-redux" / f"{subject}.csv")
    return root


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    """A server on a demo store (one benchmark per kind); an admin and an annotator."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("browser-crawl"))
    store = Store.open(settings)
    lines = list(load_demo_data(store, _demo_subset(tmp_path_factory.mktemp("crawl-data"))))
    assert len(lines) >= 4, lines
    for name, role in (("ada", "admin"), ("ann", "annotator")):
        ensure_user(settings, name, role, PASSWORD)
    # A queue on a choice and on a pair benchmark, so an annotator has pages to reach.
    with transaction(store.factory) as session:
        for bench in ("mmlu-redux", "judgebench"):
            benchmark = get_benchmark(session, bench)
            ids = session.scalars(
                select(Instance.id).where(Instance.benchmark_id == benchmark.id).limit(3)
            ).all()
            queues.create_queue(
                session,
                benchmark,
                ids,
                name=f"check {bench}",
                label_name="reference",
                source="filter",
                overlap_k=1,
                assignees=["ann"],
                created_by="ada",
            )
    store.engine.dispose()
    with live_server(settings) as url:
        yield url, settings


def _shape(path_and_query: str) -> str:
    """The page a URL shows, without which item: numbers and ids folded, parameter names kept."""
    parts = urlsplit(path_and_query)
    segments = [
        "#" if re.fullmatch(r"[0-9a-f]{6,}|\d+|.*\d.*", seg) else seg
        for seg in parts.path.split("/")
    ]
    # Paging and sorting show the same page with other rows: not a shape of their own.
    names = sorted({k for k, _ in parse_qsl(parts.query)} - {"page", "sort"})
    return "/".join(segments) + "?" + "&".join(names)


def _links(page: Any, base: str) -> list[str]:
    """The same-site links of the page, as path and query (no fragment)."""
    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
    found = []
    for href in hrefs:
        if not href or href.startswith(("#", "mailto:", "javascript:")):
            continue
        absolute = urlsplit(urljoin(page.url, href))
        if f"{absolute.scheme}://{absolute.netloc}" != base:
            continue
        found.append(absolute.path + (f"?{absolute.query}" if absolute.query else ""))
    return found


def _settle(page: Any) -> None:
    """Wait for the page's own requests (htmx sections) to finish; polling pages never idle."""
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_load_state("networkidle", timeout=3_000)


def _crawl(browser: Any, url: str, settings: Settings, name: str, role: str) -> dict[str, Any]:
    """Crawl as ``name``; returns the dead links, the console errors and what was visited."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    problems = _watch(page)
    page.goto(f"{url}/signin/{token_for(settings, name, role, TokenKind.signin)}")
    page.click("#use-link")
    page.wait_for_load_state()
    checked: dict[str, int] = {}
    checks_per_shape: dict[str, int] = {}
    dead: dict[str, str] = {}
    console: dict[str, list[str]] = {}
    per_shape: dict[str, int] = {}
    # The front page for an admin; the queue list an annotator is sent to on sign-in.
    landing = urlsplit(page.url)
    queue = deque([landing.path + (f"?{landing.query}" if landing.query else "")])
    visited: list[str] = []
    while queue and len(visited) < MAX_VISITS:
        target = queue.popleft()
        shape = _shape(target)
        if per_shape.get(shape, 0) >= VISITS_PER_SHAPE:
            continue
        per_shape[shape] = per_shape.get(shape, 0) + 1
        problems.clear()
        response = page.goto(url + target)
        assert response is not None
        visited.append(urlsplit(page.url).path)  # where it landed, after redirects
        if response.status >= 400:
            dead[target] = f"{response.status} (visited)"
            continue
        _settle(page)
        if problems:
            console[target] = list(problems)
        for link in _links(page, url):
            if link in checked or SKIP.match(link):
                continue
            link_shape = _shape(link)
            if checks_per_shape.get(link_shape, 0) >= CHECKS_PER_SHAPE:
                continue
            checks_per_shape[link_shape] = checks_per_shape.get(link_shape, 0) + 1
            status = context.request.get(url + link, max_redirects=5).status
            checked[link] = status
            if status >= 400:
                dead[link] = f"{status} (linked from {target})"
            elif not DOWNLOAD.search(link) and not link.startswith("/api/"):
                queue.append(link)
    context.close()
    return {"dead": dead, "console": console, "visited": visited, "checked": len(checked)}


@pytest.mark.parametrize(("name", "role"), [("ada", "admin"), ("ann", "annotator")])
def test_every_link_answers_and_no_page_logs_an_error(
    browser: Any, served: tuple[str, Settings], name: str, role: str
) -> None:
    url, settings = served
    found = _crawl(browser, url, settings, name, role)
    assert found["dead"] == {}
    assert found["console"] == {}
    # The crawl reached beyond its landing page: for the admin every benchmark's pages, for
    # the annotator a queue's items.
    pages = " ".join(found["visited"])
    if role == "admin":
        assert len(found["visited"]) >= 30, pages
        for bench in ("judgebench", "truth", "real-world-scenarios", "mmlu-redux"):
            assert f"/benchmarks/{bench}/metrics" in pages, bench
    else:
        assert "/items/" in pages, pages


def test_paging_each_disagreements_list_logs_nothing(
    browser: Any, served: tuple[str, Settings]
) -> None:
    """Issue 21 item 7: next, previous and back on every demo benchmark's list, by htmx clicks.

    Console errors and CSP violations (a ``securitypolicyviolation`` listener sees them even
    where the console does not call them errors) are both checked.
    """
    url, settings = served
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation', e =>"
        " window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
    )
    page = context.new_page()
    problems = _watch(page)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(f"{url}/signin/{token_for(settings, 'ada', 'admin', TokenKind.signin)}")
    page.click("#use-link")
    paged = []
    for bench in ("judgebench", "truth", "real-world-scenarios", "mmlu-redux"):
        page.goto(f"{url}/benchmarks/{bench}/disagreements")
        _settle(page)
        if page.locator("nav.pager a[rel=next]").count() == 0:
            continue
        paged.append(bench)
        for rel in ("next", "prev"):
            with page.expect_response(lambda r: "/disagreements" in r.url):
                page.locator(f"nav.pager a[rel={rel}]").click()
            page.wait_for_function("() => document.querySelector('.htmx-request') === null")
        page.go_back()
        _settle(page)
        assert "page=2" in page.url, bench
        assert (bench, problems, page.evaluate("window.__csp")) == (bench, [], [])
    context.close()
    # The demo has lists long enough to page (label-errors on MMLU-Redux at least).
    assert "mmlu-redux" in paged, paged
