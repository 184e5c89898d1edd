"""Headless Chromium on the disagreements form: every mode picked and submitted in the form.

On the bundled JudgeBench data: each mode with its detector(s) (and judge) chosen in the form
lists ranked rows equal to the API's list for the URL the page pushed; switching from
consensus with k filled to threshold still lists rows; a failing htmx request (a bad value, an
unreachable server) shows its reason in the page's error region.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from app.services.disagreements.disagreement_query import mode_param_names
from app.services.disagreements.modes import DisagreementMode, all_modes
from app.settings import Settings
from app.web.disagreement_pages import PAGE_ROWS
from tests.browser.test_metrics import base_url, browser_settings
from tests.browser.test_pages import browser
from tests.ingest.test_helpers import O1_MINI_JUDGE
from tests.support.auth_support import signed_in_context
from tests.web.test_disagreements_web import REWARDS, form_choices

pytest.importorskip("playwright.sync_api")

pytestmark = pytest.mark.browser

# Shared fixtures, imported so pytest finds them here: Chromium, and a server on its own
# SQLite store holding JudgeBench (GPT-4o pairs, o1-mini, 3 RMs).
__all__ = ["base_url", "browser", "browser_settings"]

PATH = "/benchmarks/judgebench/disagreements"
SHOTS = Path("/tmp")


@pytest.fixture
def page(browser: Any, base_url: str, browser_settings: Settings) -> Iterator[tuple[Any, list]]:
    context = signed_in_context(
        browser, base_url, browser_settings, viewport={"width": 1400, "height": 1000}
    )
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(f"{base_url}{PATH}")
    yield pg, errors
    context.close()


def swap(pg: Any, action: Callable[[], None]) -> None:
    """Do ``action`` in the form and wait until htmx has swapped in the answer."""
    with pg.expect_response(lambda r: PATH in r.url and r.request.method == "GET"):
        action()
    pg.wait_for_function("() => document.querySelector('.htmx-request') === null")


def rows(pg: Any) -> list[str]:
    return [str(t) for t in pg.locator("table.disagreements td.id a").all_inner_texts()]


def api_rows(pg: Any, base_url: str) -> list[str]:
    """The API's list for the query string the page pushed into the address bar.

    The page shows it :data:`PAGE_ROWS` at a time.
    """
    query = urlsplit(pg.url).query
    answer = pg.context.request.get(f"{base_url}/api{PATH}?{query}")
    assert answer.ok, answer.text()
    return [item["external_id"] for item in answer.json()["items"]]


# The modes JudgeBench (pairwise) offers; label-errors lists choice and answer items.
MODES = [m for m in all_modes() if m.applies_to("pairwise")]


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_each_mode_from_the_form_lists_ranked_rows(
    page: tuple[Any, list[str]], base_url: str, mode: DisagreementMode
) -> None:
    detectors, judges = form_choices(mode)
    pg, errors = page
    swap(pg, lambda: pg.select_option("#dq-mode", mode.name))
    assert pg.locator("#results").inner_text().startswith("Choose a detector")
    # The form now shows this mode's own fields, and one or several detectors as it takes.
    for name in mode_param_names():
        assert pg.locator(f"#dq-{name}").count() == (mode.param(name) is not None), name
    multiple = pg.locator("#dq-detector").get_attribute("multiple")
    assert (multiple is not None) is mode.detectors.many
    swap(pg, lambda: pg.select_option("#dq-detector", detectors))
    for name, judge in judges.items():
        assert rows(pg) == []  # the judge is still missing
        swap(pg, lambda name=name, judge=judge: pg.select_option(f"#dq-{name}", judge))
    swap(pg, lambda: pg.click("#disagreement-filters button[type=submit]"))
    listed = rows(pg)
    assert listed, f"{mode.name}: no rows"
    assert f"mode={mode.name}" in pg.url
    assert listed == api_rows(pg, base_url)[:PAGE_ROWS]
    assert pg.locator("#request-error").is_hidden()
    if mode.detectors.many:
        pg.screenshot(path=str(SHOTS / "appellate-disagreements-form.png"), full_page=False)
    assert errors == []


def test_threshold_after_consensus_with_k_lists_rows(
    page: tuple[Any, list[str]], base_url: str
) -> None:
    pg, errors = page
    swap(pg, lambda: pg.select_option("#dq-mode", "consensus"))
    swap(pg, lambda: pg.select_option("#dq-detector", REWARDS))
    pg.fill("#dq-k", "2")
    swap(pg, lambda: pg.click("#disagreement-filters button[type=submit]"))
    assert "k=2" in pg.url and pg.locator("#dq-k").input_value() == "2"
    consensus = rows(pg)
    assert consensus
    # Switch to threshold with k (and three detectors) still in the form.
    swap(pg, lambda: pg.select_option("#dq-mode", "threshold"))
    listed = rows(pg)
    assert listed and listed != consensus
    assert "k=" not in pg.url and pg.locator("#dq-k").count() == 0
    assert pg.locator("#dq-detector").input_value() == REWARDS[0]
    assert listed == api_rows(pg, base_url)[:PAGE_ROWS]
    swap(pg, lambda: pg.click("#disagreement-filters button[type=submit]"))
    assert rows(pg) == listed and pg.locator("#request-error").is_hidden()
    assert errors == []


def test_a_failing_request_shows_its_error(page: tuple[Any, list[str]]) -> None:
    pg, _ = page
    swap(pg, lambda: pg.select_option("#dq-detector", REWARDS[0]))
    before = rows(pg)
    assert before
    region = pg.locator("#request-error")
    assert region.is_hidden()
    # An out-of-range cut: the server answers 422 and says why; the list stays.
    pg.fill("#dq-min_confidence", "2")
    swap(pg, lambda: pg.press("#dq-min_confidence", "Enter"))
    assert region.is_visible()
    assert "min_confidence must lie in [0, 1], got 2.0" in region.inner_text()
    assert "422" in region.locator(".request-error-title").inner_text()
    assert rows(pg) == before
    pg.screenshot(path=str(SHOTS / "appellate-htmx-error.png"), full_page=False)
    pg.click(".request-error-close")
    assert region.is_hidden()
    # No answer at all (the server unreachable): the region says so.
    pg.route(f"**{PATH}?*", lambda route: route.abort())
    pg.fill("#dq-min_confidence", "0.9")
    pg.press("#dq-min_confidence", "Enter")
    pg.wait_for_selector("#request-error:not([hidden])")
    assert "could not be reached" in region.inner_text()
    pg.unroute(f"**{PATH}?*")
    # The next answer from the same form clears it.
    swap(pg, lambda: pg.click("#disagreement-filters button[type=submit]"))
    assert region.is_hidden() and rows(pg)


def test_next_and_prev_walk_a_long_list(page: tuple[Any, list[str]], base_url: str) -> None:
    pg, errors = page
    swap(pg, lambda: pg.select_option("#dq-mode", "judge-orders"))
    swap(pg, lambda: pg.select_option("#dq-detector", O1_MINI_JUDGE))
    first = rows(pg)
    everything = api_rows(pg, base_url)
    assert len(everything) > PAGE_ROWS and first == everything[:PAGE_ROWS]
    swap(pg, lambda: pg.click("nav.pager a[rel=next]"))
    assert "page=2" in pg.url and rows(pg) == everything[PAGE_ROWS : 2 * PAGE_ROWS]
    assert pg.locator("table.disagreements td.num.muted").first.inner_text() == str(PAGE_ROWS + 1)
    assert pg.locator("#dq-mode").input_value() == "judge-orders"  # the form kept its choices
    swap(pg, lambda: pg.click("nav.pager a[rel=prev]"))
    assert "page=" not in pg.url and rows(pg) == first
    assert errors == []
