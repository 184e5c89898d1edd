"""Headless Chromium at 1280 px on the bundled JudgeBench: sorting, columns, instance page.

The instance table sorts by a header click (the URL and the API agree), keeps the chosen
columns per benchmark across reloads, and never makes the page scroll sideways; the instance
page shows labels and scores beside the responses, renders Markdown and LaTeX, and keeps a
response holding the XSS corpus inert.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from app import migrate
from app.db import make_engine, session_factory, transaction
from app.ingest.judgebench import import_judgebench
from app.settings import Settings
from app.tables import Benchmark, Instance
from tests.browser.test_pages import browser
from tests.ingest.test_helpers import O1_MINI, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.support.auth_support import signed_in_context
from tests.support.live_server import live_server
from tests.web.test_markdown_render import UNFENCED, XSS_CORPUS

pytest.importorskip("playwright.sync_api")

pytestmark = pytest.mark.browser

__all__ = ["browser"]  # the shared Chromium fixture, imported so pytest finds it here

REWARD = "reward_model/Skywork_Skywork-Reward-Gemma-2-27B"
WIDTH = 1280
SHOTS = Path("/tmp")
RICH = (
    "# Solution\n\nThe **key step** is *this*, and `code` stays code.\n\n"
    "- first\n- second\n\n"
    "Inline $x^2 + y^2 = z^2$ and display:\n\n$$\\int_0^1 x\\,dx = \\frac{1}{2}$$\n\n"
    "Also \\(a_1\\) and \\[b^2\\]; it costs $5 and $10.\n\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n\n" + XSS_CORPUS
)

# KaTeX's own "text" spans (\text{...}) must not take the app's text-block style.
TEXT_MATH = "So $f(x) = \\text{even if } x > 0$ holds."


@pytest.fixture(scope="module")
def browser_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(data_dir=tmp_path_factory.mktemp("browser-tables"))


@pytest.fixture(scope="module")
def base_url(browser_settings: Settings) -> Iterator[str]:
    """JudgeBench (GPT-4o pairs, o1-mini, 3 RMs) and one pair whose response is rich text."""
    engine = make_engine(browser_settings)
    migrate.upgrade(engine)
    with transaction(session_factory(engine)) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])
        bench = Benchmark(name="md-mini", kind="pairwise", description="", data_version=1)
        session.add(bench)
        session.flush()
        session.add(
            Instance(
                benchmark_id=bench.id,
                external_id="rich",
                group_key="rich",
                payload={"prompt": "Explain $e^{i\\pi}$.", "response_a": RICH, "response_b": "B"},
            )
        )
        session.add(
            Instance(
                benchmark_id=bench.id,
                external_id="code",
                group_key="code",
                payload={"prompt": "Solve it.", "response_a": UNFENCED, "response_b": TEXT_MATH},
            )
        )
    engine.dispose()
    with live_server(browser_settings) as url:
        yield url


@pytest.fixture
def page(browser: Any, base_url: str, browser_settings: Settings) -> Iterator[tuple[Any, list]]:
    context = signed_in_context(
        browser, base_url, browser_settings, viewport={"width": WIDTH, "height": 900}
    )
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: problems.append(str(e)))

    def on_dialog(dialog: Any) -> None:
        problems.append(f"dialog: {dialog.message}")
        dialog.dismiss()

    pg.on("dialog", on_dialog)
    yield pg, problems
    context.close()


def no_sideways_scroll(pg: Any) -> None:
    width = pg.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDTH, f"the page is {width} px wide at a {WIDTH} px window"


def table_ids(pg: Any) -> list[str]:
    return pg.locator("#results table.instances td.id a").all_inner_texts()


def test_header_sorts_by_score_like_the_api(page: tuple[Any, list], base_url: str) -> None:
    pg, problems = page
    pg.goto(f"{base_url}/benchmarks/judgebench")
    no_sideways_scroll(pg)
    # Wide tables scroll inside their own box, which the window never outgrows.
    wrap = pg.locator(".table-wrap").bounding_box()
    assert wrap is not None and wrap["x"] + wrap["width"] <= WIDTH
    header = pg.locator(f'th[data-col="score:{REWARD}"] a')
    with pg.expect_response(lambda r: "sort=" in r.url):
        header.click()
    pg.wait_for_url(f"**/benchmarks/judgebench?sort=-score%3A{quote(REWARD, safe='')}")
    pg.wait_for_function("() => document.querySelector('.htmx-request') === null")
    shown = table_ids(pg)[:20]
    api = pg.request.get(
        f"{base_url}/api/benchmarks/judgebench/instances",
        params={"sort": f"-score:{REWARD}", "page_size": "20"},
    ).json()
    assert shown == [item["external_id"] for item in api["items"]]
    scores = [item["scores"][REWARD] for item in api["items"]]
    assert scores == sorted(scores, reverse=True)
    assert pg.locator(f'th[data-col="score:{REWARD}"]').get_attribute("aria-sort") == "descending"
    # Cells show three decimals and the full value on hover.
    cell = pg.locator("#results tbody tr").first.locator("td.num").last
    assert len(cell.inner_text().split(".")[-1]) == 3 and cell.get_attribute("title")

    # A second click flips the order; the filter form keeps the order when a filter changes.
    with pg.expect_response(lambda r: "sort=score" in r.url):
        pg.locator(f'th[data-col="score:{REWARD}"] a').click()
    pg.wait_for_url("**sort=score%3A*")
    pg.wait_for_function("() => document.querySelector('.htmx-request') === null")
    with pg.expect_response(lambda r: "label=" in r.url):
        pg.locator("select[name=label]").first.select_option(index=1)
    pg.wait_for_function("() => document.querySelector('.htmx-request') === null")
    assert "sort=score%3A" in pg.url and "label=" in pg.url
    # Sticky header and first column: still in place after scrolling the table's box.
    pg.locator(".table-wrap").evaluate("el => { el.scrollTop = 400; el.scrollLeft = 600; }")
    head = pg.locator("table.instances thead tr.head-cols th").first.bounding_box()
    box = pg.locator(".table-wrap").bounding_box()
    assert head and box and abs(head["y"] - box["y"]) < 40 and abs(head["x"] - box["x"]) < 3
    no_sideways_scroll(pg)
    pg.screenshot(path=str(SHOTS / "appellate-table-1280.png"))
    assert problems == []


def test_column_chooser_persists_per_benchmark(page: tuple[Any, list], base_url: str) -> None:
    pg, problems = page
    pg.goto(f"{base_url}/benchmarks/judgebench")
    column = f'th[data-col="score:{REWARD}"]'
    assert pg.locator(column).is_visible()
    pg.locator(".column-chooser summary").click()
    pg.locator(f'.column-chooser input[value="score:{REWARD}"]').uncheck()
    pg.locator(".column-chooser input[value=text]").uncheck()
    assert not pg.locator(column).is_visible()
    assert not pg.locator("td.preview").first.is_visible()
    pg.reload()
    assert not pg.locator(column).is_visible()
    assert not pg.locator("td.preview").first.is_visible()
    # Also after an htmx swap (next page).
    with pg.expect_response(lambda r: "page=2" in r.url):
        pg.locator(".pager a[rel=next]").click()
    pg.wait_for_function("() => document.querySelector('.htmx-request') === null")
    assert not pg.locator(column).is_visible()
    # Header groups span only what is left; another benchmark keeps all its columns.
    widths = pg.evaluate(
        "() => [...document.querySelectorAll('table.instances tr')].slice(1, 4)"
        ".map(tr => [...tr.children].filter(c => c.offsetParent !== null).length)"
    )
    assert len(set(widths)) == 1
    pg.goto(f"{base_url}/benchmarks/md-mini")
    assert pg.locator("td.preview").first.is_visible()
    pg.goto(f"{base_url}/benchmarks/judgebench")
    pg.locator(".column-chooser summary").click()
    pg.locator(".column-chooser .columns-all").click()
    assert pg.locator(column).is_visible()
    assert problems == []


def idle(pg: Any) -> None:
    """Wait until htmx has no request in flight."""
    pg.wait_for_function("() => document.querySelector('.htmx-request') === null")


def url_cols(url: str) -> list[str] | None:
    """The ``cols`` values of ``url`` (``None`` when it has none)."""
    query = parse_qs(urlsplit(url).query, keep_blank_values=True)
    return query.get("cols")


def test_sorted_column_stays_in_view_and_reads_as_a_chip(
    page: tuple[Any, list], base_url: str
) -> None:
    """Issue 21 item 8: a column sorted by shows even when hidden; the order reads as words."""
    pg, problems = page
    pg.goto(f"{base_url}/benchmarks/judgebench")
    column = pg.locator(f'th[data-col="score:{REWARD}"]')
    with pg.expect_response(lambda r: "sort=" in r.url):
        column.locator("a").click()
    pg.wait_for_url("**sort=-score*")
    idle(pg)
    chip = pg.locator(".sort-chip")
    assert chip.inner_text().split() == (f"Sorted by score of {REWARD}, descending ✕".split())
    assert "sort=" not in pg.locator(".table-bar").inner_text()
    # Hidden in the chooser while sorted by it: it stays, with its cells.
    pg.locator(".column-chooser summary").click()
    pg.locator(f'.column-chooser input[value="score:{REWARD}"]').uncheck()
    pg.locator(".column-chooser input[value=text]").uncheck()
    assert column.is_visible()
    assert not pg.locator("td.preview").first.is_visible()
    shown = pg.evaluate(
        "() => [...document.querySelector('#results tbody tr').children]"
        ".filter(c => c.offsetParent !== null).length"
    )
    heads = pg.evaluate(
        "() => [...document.querySelectorAll('tr.head-cols > th')]"
        ".filter(c => c.offsetParent !== null).length"
    )
    assert shown == heads
    # The chip's cross removes the sort; the column then hides as chosen.
    with pg.expect_response(lambda r: "/benchmarks/judgebench" in r.url and "sort=" not in r.url):
        chip.locator("a.sort-clear").click()
    idle(pg)
    pg.wait_for_function("() => !location.search.includes('sort=')")
    assert pg.locator(".sort-chip").count() == 0
    assert not column.is_visible()
    assert url_cols(pg.url) is not None and f"score:{REWARD}" not in url_cols(pg.url)
    # Loaded sorted by it (a pasted link): shown, though the link hides it.
    pg.goto(f"{base_url}/benchmarks/judgebench?sort=score%3A{quote(REWARD, safe='')}&cols=")
    assert column.is_visible()
    chip_text = pg.locator(".sort-chip").inner_text()
    assert chip_text.startswith(f"Sorted by score of {REWARD}, ascending")
    assert not pg.locator('th[data-col="group"]').is_visible()
    assert problems == []


def test_column_choice_lives_in_the_url(
    page: tuple[Any, list], browser: Any, base_url: str, browser_settings: Settings
) -> None:
    """Issue 21 item 8: the chooser writes ``cols``; a pasted link shows the same columns."""
    pg, problems = page
    pg.goto(f"{base_url}/benchmarks/judgebench")
    pg.locator(".column-chooser summary").click()
    pg.locator(f'.column-chooser input[value="score:{REWARD}"]').uncheck()
    pg.locator(".column-chooser input[value=group]").uncheck()
    pg.wait_for_function("() => location.search.includes('cols=')")
    boxes = pg.locator(".column-chooser input[type=checkbox]")
    values = [boxes.nth(i).get_attribute("value") for i in range(boxes.count())]
    assert url_cols(pg.url) == [v for v in values if v not in (f"score:{REWARD}", "group")]
    link = pg.url

    # Another browser (nothing stored) opening the link sees the same columns.
    other = signed_in_context(
        browser, base_url, browser_settings, viewport={"width": WIDTH, "height": 900}
    )
    try:
        p2 = other.new_page()
        p2.set_default_timeout(15_000)
        errors: list[str] = []
        p2.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        p2.goto(link)
        score = p2.locator(f'th[data-col="score:{REWARD}"]')
        group = p2.locator('th[data-col="group"]')
        assert not score.is_visible() and not group.is_visible()
        assert p2.locator("td.preview").first.is_visible()
        # Paging, a filter and a row's page (and back) keep them.
        with p2.expect_response(lambda r: "page=2" in r.url):
            p2.locator(".pager a[rel=next]").click()
        idle(p2)
        p2.wait_for_function("() => location.search.includes('page=2')")
        assert url_cols(p2.url) == url_cols(link)
        assert not score.is_visible() and not group.is_visible()
        with p2.expect_response(lambda r: "label=" in r.url):
            p2.locator("select[name=label]").first.select_option(index=1)
        idle(p2)
        p2.wait_for_function("() => location.search.includes('label=')")
        assert url_cols(p2.url) == url_cols(link)
        assert not score.is_visible() and not group.is_visible()
        p2.locator("#results td.id a").first.click()
        p2.wait_for_url("**/instances/**")
        p2.locator("a", has_text="back to table").click()
        p2.wait_for_url("**/benchmarks/judgebench?*")
        assert url_cols(p2.url) == url_cols(link)
        assert not score.is_visible() and not group.is_visible()
        assert errors == []
    finally:
        other.close()

    # Back here, showing all again drops ``cols`` from the address and the links.
    pg.locator(".column-chooser .columns-all").click()
    pg.wait_for_function("() => !location.search.includes('cols=')")
    assert pg.locator(f'th[data-col="score:{REWARD}"]').is_visible()
    assert "cols=" not in (pg.locator(".pager a[rel=next]").get_attribute("href") or "")
    assert problems == []


def test_enter_in_the_search_box_sends_one_request(page: tuple[Any, list], base_url: str) -> None:
    """Issue 21 item 7: Enter fires "change" and "submit"; the filter form asks once."""
    pg, problems = page
    pg.goto(f"{base_url}/benchmarks/judgebench")
    sent: list[str] = []
    pg.on("request", lambda r: sent.append(r.url) if "/benchmarks/judgebench?" in r.url else None)
    pg.fill("#q", "gpt")
    with pg.expect_response(lambda r: "q=gpt" in r.url):
        pg.press("#q", "Enter")
    idle(pg)
    pg.wait_for_timeout(600)  # the typing's own delayed request (300 ms) would have left too
    assert len(sent) == 1, sent
    assert "q=gpt" in pg.url
    assert problems == []


def test_instance_page_fits_and_shows_verdicts_beside_responses(
    page: tuple[Any, list], base_url: str
) -> None:
    pg, problems = page
    pg.goto(f"{base_url}/benchmarks/judgebench?sort=-score%3A{quote(REWARD, safe='')}")
    pg.locator("#results td.id a").first.click()
    pg.wait_for_url("**/instances/**")
    no_sideways_scroll(pg)
    b = pg.locator(".pane-b").bounding_box()
    side = pg.locator("aside .verdicts").bounding_box()
    assert b and side and side["x"] >= b["x"] + b["width"] and side["y"] < b["y"] + 200
    assert "reference" in pg.locator("aside .verdicts").inner_text()
    score = pg.locator("aside .verdicts td.num .score").first
    assert len(score.inner_text().split(".")[-1]) == 3
    assert float(score.get_attribute("title")) == pytest.approx(float(score.inner_text()), abs=6e-4)
    assert pg.locator("a[rel=next]").count() == 1 and "sort=-score" in pg.url
    assert problems == []


def test_rich_response_renders_formatted_and_inert(page: tuple[Any, list], base_url: str) -> None:
    pg, problems = page
    pg.goto(f"{base_url}/benchmarks/md-mini/instances/rich")
    pane = pg.locator(".pane-a .model-text.md")
    pane.locator("strong", has_text="key step").wait_for()
    assert pane.locator("h1", has_text="Solution").count() == 1
    assert pane.locator("table td").count() == 2
    pg.wait_for_function("() => document.querySelectorAll('.pane-a .katex').length >= 4")
    assert pane.locator(".katex-display").count() == 2
    assert pg.locator(".prompt .katex").count() == 1
    assert "$5 and $10" in pane.inner_text()
    # Inert: nothing ran, no element the corpus names exists, links stay safe.
    pg.wait_for_timeout(300)
    assert pg.evaluate("window.__pwned === undefined")
    assert (
        pg.locator("main script, main iframe, main img, main svg[onload], main object").count() == 0
    )
    hrefs = pane.locator("a").evaluate_all("els => els.map(a => a.getAttribute('href'))")
    assert all(h.startswith(("https://", "http://", "/", "mailto:")) for h in hrefs), hrefs
    assert "<script>" in pane.inner_text()
    # The raw text is one click away and escaped.
    pg.locator(".pane-a .raw-toggle").click()
    raw = pg.locator(".pane-a .raw-text")
    assert raw.is_visible() and not pane.is_visible()
    assert raw.inner_text() == RICH
    pg.locator(".pane-a .raw-toggle").click()
    assert pane.is_visible()
    no_sideways_scroll(pg)
    pg.screenshot(path=str(SHOTS / "appellate-instance-rich-1280.png"), full_page=True)
    assert problems == []


def test_unfenced_code_keeps_its_layout_and_katex_text_its_style(
    page: tuple[Any, list], base_url: str
) -> None:
    """Issue 21 item 6: unfenced code kept line by line; KaTeX text inside math unstyled."""
    pg, problems = page
    pg.goto(f"{base_url}/benchmarks/md-mini/instances/code")
    code = pg.locator(".pane-a .model-text.md pre")
    assert code.count() == 1
    assert code.inner_text().rstrip("\n") == UNFENCED
    # The box keeps spaces and line breaks as written (the browser would collapse them).
    assert pg.evaluate("getComputedStyle(document.querySelector('.pane-a pre')).whiteSpace") == (
        "pre"
    )
    pg.wait_for_function("() => document.querySelector('.pane-b .katex .text') !== null")
    style = pg.locator(".pane-b .katex .text").first.evaluate(
        "el => { const s = getComputedStyle(el);"
        " return [s.paddingLeft, s.paddingTop, s.whiteSpace]; }"
    )
    assert style == ["0px", "0px", "nowrap"], style
    assert "even if" in pg.locator(".pane-b .katex").inner_text().replace("\xa0", " ")
    no_sideways_scroll(pg)
    assert problems == []
