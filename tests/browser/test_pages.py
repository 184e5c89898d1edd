"""Headless Chromium against the real server: htmx filtering, URL state, instance panes, no XSS."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright import sync_api as playwright_api

from app.settings import Settings
from app.store import Store
from tests.support import factories as f
from tests.support.auth_support import signed_in_context
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    import os

    # A missing browser is a broken set-up, not a reason to pass: scripts/test.sh installs it.
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} missing: apt-get install chromium"
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def browser_settings(tmp_path: Path) -> Settings:
    # The browser exercises the pages, not the dialect: one SQLite store of its own, so the
    # dialect-parametrised fixtures neither run it twice nor skip it.
    return Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'browser.sqlite3'}")


@pytest.fixture
def base_url(browser_settings: Settings) -> Iterator[str]:
    settings = browser_settings
    store = Store.open(settings)
    f.seed_benchmarks(store.factory)
    with live_server(settings) as url:
        yield url
    store.close()


@dataclass
class Watch:
    """What the page did that it must not do: dialogs, console errors, failed requests."""

    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def page(
    browser: object, base_url: str, browser_settings: Settings
) -> Iterator[tuple[object, Watch]]:
    context = signed_in_context(
        browser, base_url, browser_settings, viewport={"width": 1400, "height": 900}
    )
    pg = context.new_page()
    watch = Watch()

    def on_dialog(dialog: object) -> None:
        watch.dialogs.append(dialog.message)  # type: ignore[attr-defined]
        dialog.dismiss()  # type: ignore[attr-defined]

    pg.on("dialog", on_dialog)
    pg.on("console", lambda m: watch.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: watch.errors.append(str(e)))
    pg.set_default_timeout(10_000)
    yield pg, watch
    context.close()


def table_ids(pg: object) -> set[str]:
    return set(pg.locator("#results td.id a").all_inner_texts())  # type: ignore[attr-defined]


def wait_for_ids(pg: object, expected: set[str]) -> None:
    deadline = time.monotonic() + 10
    while table_ids(pg) != expected:
        assert time.monotonic() < deadline, f"table shows {table_ids(pg)}, expected {expected}"
        pg.wait_for_timeout(50)  # type: ignore[attr-defined]


def test_search_and_filters_update_the_table_and_the_url(
    page: tuple[object, Watch], base_url: str
) -> None:
    pg, watch = page
    pg.goto(f"{base_url}/benchmarks/jb-mini")
    wait_for_ids(pg, {p.external_id for p in f.PAIRS})
    # A marker on window survives htmx swaps but not a full page load.
    pg.evaluate("window.__marker = 42")

    pg.locator("#q").press_sequentially("zebra", delay=20)
    wait_for_ids(pg, {"pair-005"})
    pg.wait_for_url("**/benchmarks/jb-mini?q=zebra")
    assert pg.evaluate("window.__marker") == 42

    pg.locator("#q").fill("")
    pg.locator("select[name=flip]").select_option("yes")
    wait_for_ids(pg, {"pair/002", "pair-005"})
    pg.wait_for_url("**/benchmarks/jb-mini?judge=*&flip=yes")
    assert pg.evaluate("window.__marker") == 42

    pg.locator("select[name=label]").select_option("reference=B")
    # The rows are those of the flip filter alone: wait for the URL (a change waits 100 ms).
    pg.wait_for_url("**label=reference%3DB*")
    wait_for_ids(pg, {"pair/002", "pair-005"})
    pg.locator("select[name=slice] >> nth=0").select_option("source=livecodebench")
    wait_for_ids(pg, {"pair-005"})
    assert "slice=source%3Dlivecodebench" in pg.url and "label=reference%3DB" in pg.url

    # The pushed URL reproduces the view on a fresh load (a pasted link).
    pg.goto(pg.url)
    wait_for_ids(pg, {"pair-005"})
    assert pg.locator("select[name=flip]").input_value() == "yes"

    pg.go_back()
    pg.go_back()
    wait_for_ids(pg, {"pair/002", "pair-005"})
    assert watch.dialogs == [] and watch.errors == []


def test_click_through_to_side_by_side_panes(page: tuple[object, Watch], base_url: str) -> None:
    pg, watch = page
    pg.goto(f"{base_url}/benchmarks/jb-mini?flip=yes")
    pg.get_by_role("link", name="pair/002", exact=True).click()
    pg.wait_for_url("**/benchmarks/jb-mini/instances/pair%2F002?*")
    a = pg.locator(".pane-a").bounding_box()
    b = pg.locator(".pane-b").bounding_box()
    judges = pg.locator("aside.judges").bounding_box()
    assert a and b and judges
    assert abs(a["y"] - b["y"]) < 2 and a["x"] + a["width"] <= b["x"]
    assert b["x"] + b["width"] <= judges["x"]
    assert pg.locator(".pane-a .model-text").inner_text() == "Answer A."
    assert "flip" in pg.locator("aside.judges").inner_text()

    # "p" steps to the previous instance of the same filtered view ("-" sorts before "/"),
    # swapping the page body through htmx and pushing its URL.
    assert pg.locator("a[rel=next]").count() == 0
    pg.evaluate("window.__marker = 7")
    pg.locator("body").press("p")
    pg.locator("h1.id", has_text="pair-005").wait_for()
    assert "/instances/pair-005?" in pg.url and "flip=yes" in pg.url
    assert pg.evaluate("window.__marker") == 7
    assert pg.title() == "pair-005 · jb-mini · Appellate"
    assert watch.dialogs == [] and watch.errors == []


def test_injected_markup_never_runs(page: tuple[object, Watch], base_url: str) -> None:
    pg, watch = page
    pg.goto(f"{base_url}/benchmarks/jb-mini/instances/pair-003-xss")
    assert f.SCRIPT in pg.locator(".pane-a .model-text").inner_text()
    assert f.IMG in pg.locator(".pane-b .model-text").inner_text()
    assert pg.locator("img[src=x]").count() == 0
    pg.locator("details.raw summary").first.click()
    assert f.RAW_SCRIPT in pg.locator("details.raw .model-text").first.inner_text()
    assert pg.evaluate("document.querySelectorAll('main script').length") == 0

    # The same text arriving through an htmx swap stays text too.
    pg.goto(f"{base_url}/benchmarks/jb-mini")
    pg.locator("#q").press_sequentially("<script>", delay=20)
    wait_for_ids(pg, {"pair-003-xss"})
    pg.wait_for_timeout(300)
    assert pg.locator("#results img").count() == 0
    assert watch.dialogs == []
    assert watch.errors == []


def test_slash_focuses_search(page: tuple[object, Watch], base_url: str) -> None:
    pg, _ = page
    pg.goto(f"{base_url}/benchmarks/jb-mini")
    pg.locator("body").press("/")
    assert pg.evaluate("document.activeElement.id") == "q"


def test_a_choice_benchmark_imported_as_a_table_has_instance_pages(
    browser: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 item 2: its instance page answered 500 (no ``errata`` label on such a benchmark)."""
    import csv

    from typer.testing import CliRunner

    from app.cli.imports import import_app

    settings = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'c.sqlite3'}")
    Store.open(settings).close()
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    path = tmp_path / "two.csv"
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, ["id", "q", "a", "b", "gold", "m1"])
        writer.writeheader()
        for ext, q, gold in [("q1", "Is water wet?", "A"), ("q2", "Is fire cold?", "B")]:
            writer.writerow({"id": ext, "q": q, "a": "yes", "b": "no", "gold": gold, "m1": "A"})
    args = ["table", str(path), "--kind", "choice", "--id", "id", "--map", "question=q"]
    args += ["--option", "A=a", "--option", "B=b", "--reference", "gold", "--answers", "m1=m1"]
    result = CliRunner().invoke(import_app, args)
    assert result.exit_code == 0, result.output
    with live_server(settings) as url:
        context = signed_in_context(browser, url, settings)
        pg = context.new_page()
        errors: list[str] = []
        pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        for ext, question, answer in [("q1", "Is water wet?", "A"), ("q2", "Is fire cold?", "B")]:
            got = pg.goto(f"{url}/benchmarks/two/instances/{ext}")
            assert got is not None and got.status == 200
            body = pg.locator("main").inner_text()
            assert question in body and "yes" in body and "no" in body
            assert answer in body and "Expert annotation" not in body
        context.close()
        assert errors == []


# Issue 21 item 12: the main pages at phone width and in the dark theme.
MAIN_PAGES = [
    "/",
    "/benchmarks/jb-mini",
    "/benchmarks/jb-mini/instances/pair-005",
    "/benchmarks/jb-mini/metrics?resamples=20",
    "/benchmarks/jb-mini/disagreements",
    "/queues",
    "/jobs",
    "/account",
]


def _luminance(css_colour: str) -> float:
    """Relative luminance (0 black, 1 white) of an ``rgb(...)``/``rgba(...)`` colour."""
    r, g, b = (int(v) / 255 for v in css_colour.split("(")[1].split(")")[0].split(",")[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_main_pages_fit_a_phone_and_follow_the_dark_theme(
    browser: object, base_url: str, browser_settings: Settings
) -> None:
    for scheme in ("light", "dark"):
        context = signed_in_context(
            browser,
            base_url,
            browser_settings,
            role="admin",
            viewport={"width": 390, "height": 844},
            color_scheme=scheme,
        )
        pg = context.new_page()
        errors: list[str] = []
        pg.on("console", lambda m, e=errors: e.append(m.text) if m.type == "error" else None)
        for path in MAIN_PAGES:
            got = pg.goto(f"{base_url}{path}")
            assert got is not None and got.status == 200, path
            width = pg.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{path} is {width} px wide at 390 px ({scheme})"
            background = pg.evaluate("getComputedStyle(document.body).backgroundColor")
            text = pg.evaluate("getComputedStyle(document.body).color")
            if scheme == "dark":
                assert _luminance(background) < 0.1 and _luminance(text) > 0.6, (path, background)
            else:
                assert _luminance(background) > 0.9 and _luminance(text) < 0.2, (path, background)
        context.close()
        assert errors == []
