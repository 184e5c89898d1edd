"""Headless Chromium: the metrics and disagreements pages render their tables and SVG plots."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from app import migrate
from app.db import make_engine, session_factory, transaction
from app.ingest.judgebench import import_judgebench
from app.settings import Settings
from tests.browser.test_pages import browser
from tests.ingest.test_helpers import O1_MINI, O1_MINI_JUDGE, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.support.auth_support import signed_in_context
from tests.support.live_server import live_server

pytest.importorskip("playwright.sync_api")

pytestmark = pytest.mark.browser

__all__ = ["browser"]  # the shared Chromium fixture, imported so pytest finds it here

REWARD = "reward_model/Skywork_Skywork-Reward-Gemma-2-27B"
SHOTS = Path("/tmp")


@pytest.fixture(scope="module")
def browser_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(data_dir=tmp_path_factory.mktemp("browser-metrics"))


@pytest.fixture(scope="module")
def base_url(browser_settings: Settings) -> Iterator[str]:
    """A server on its own SQLite store holding JudgeBench (GPT-4o pairs, o1-mini, 3 RMs)."""
    settings = browser_settings
    engine = make_engine(settings)
    migrate.upgrade(engine)
    with transaction(session_factory(engine)) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])
    engine.dispose()
    with live_server(settings) as url:
        yield url


def test_metrics_page_renders_plots(
    browser: object, base_url: str, browser_settings: Settings
) -> None:
    context = signed_in_context(
        browser, base_url, browser_settings, viewport={"width": 1400, "height": 1000}
    )
    pg = context.new_page()
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.goto(f"{base_url}/benchmarks/judgebench/metrics?resamples=200")
    # One ROC and one PR polyline per detector (three reward models and o1-mini's two-order
    # score); a histogram per detector.
    assert pg.locator("svg.roc polyline.curve").count() == 4
    assert pg.locator("svg.pr polyline.curve").count() == 4
    assert pg.locator("svg.reliability polyline.curve").count() == 4
    assert pg.locator("svg.histogram").count() == 4
    assert pg.locator("svg.roc line.reference").count() == 1
    box = pg.locator("svg.roc").bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 250
    assert pg.locator("table.metric-matrix tbody tr").count() == 4
    judge = pg.locator(f'tr[data-judge="{O1_MINI_JUDGE}"] td')
    assert judge.nth(1).inner_text() == "350" and judge.nth(3).inner_text() == "110"
    pg.screenshot(path=str(SHOTS / "appellate-metrics.png"), full_page=True)
    # The label selector swaps the results through htmx and keeps the view in the URL.
    pg.select_option("select[name=label]", f"flip:{O1_MINI_JUDGE}")
    pg.wait_for_url(lambda url: "label=flip" in url)
    pg.wait_for_selector("text=positive class")
    assert "flip:" in pg.locator("#results p").first.inner_text()
    assert errors == []
    context.close()


def test_disagreements_page_lists_linked_items(
    browser: object, base_url: str, browser_settings: Settings
) -> None:
    context = signed_in_context(
        browser, base_url, browser_settings, viewport={"width": 1400, "height": 900}
    )
    pg = context.new_page()
    pg.goto(
        f"{base_url}/benchmarks/judgebench/disagreements?detector={quote(REWARD, safe='')}"
        "&min_confidence=0.9"
    )
    rows = pg.locator("table.disagreements tbody tr")
    assert rows.count() > 0
    assert pg.locator("a.csv").count() == 1
    pg.screenshot(path=str(SHOTS / "appellate-disagreements.png"), full_page=False)
    first = rows.first.locator("td.id a")
    ext = first.inner_text()
    first.click()
    pg.wait_for_url(lambda url: "/instances/" in url)
    assert ext in pg.content()
    context.close()
