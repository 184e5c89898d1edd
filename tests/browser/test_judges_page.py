"""Headless Chromium: the judges page, reached from the benchmark page, compares two judges."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from app import migrate
from app.db import make_engine, session_factory, transaction
from app.ingest.judgebench import import_judgebench
from app.settings import Settings
from tests.browser.test_pages import browser
from tests.ingest.test_helpers import O1_MINI, O1_MINI_JUDGE, read_jsonl
from tests.support.auth_support import signed_in_context
from tests.support.form_support import submit_form
from tests.support.live_server import live_server
from tests.support.recorded_judges import load_recorded_judges, recorded_verdicts

pytestmark = pytest.mark.browser

__all__ = ["browser"]  # the shared Chromium fixture, imported so pytest finds it here

SMOL = "smollm2/forced"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    """JudgeBench's GPT-4o pairs with the o1-mini judge and two recorded SmolLM2 judges."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("browser-judges"))
    engine = make_engine(settings)
    migrate.upgrade(engine)
    with transaction(session_factory(engine)) as s:
        import_judgebench(s, [], outputs=[O1_MINI])  # the outputs carry their pairs
        load_recorded_judges(s, "judgebench")
    engine.dispose()
    with live_server(settings) as url:
        yield url, settings


def _o1_mini_first_slot() -> tuple[float, int]:
    """First-slot preference of o1-mini counted from its raw file, and its retained pairs."""
    ab_map = {"A>B": "A", "B>A": "B", "A=B": "tie"}
    first = decided = retained = 0
    for r in read_jsonl(O1_MINI):
        g1, g2 = (j["decision"] for j in r["judgments"])
        if g1 not in ab_map or g2 not in ab_map:
            continue
        retained += 1
        # Game 2 shows B first: its slot verdict "A>B" chose the first-shown response.
        first += (g1 == "A>B") + (g2 == "A>B")
        decided += (g1 != "A=B") + (g2 != "A=B")
    return first / decided, retained


def test_the_judges_form_compares_two_judges_on_their_shared_pairs(
    browser: Any, served: tuple[str, Settings]
) -> None:
    url, settings = served
    context = signed_in_context(browser, url, settings)
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{url}/benchmarks/judgebench")
    page.locator("a.judges-link").click()
    page.wait_for_url(f"{url}/benchmarks/judgebench/judges")
    # Unchosen, the panel shows every two-order judge.
    expect(page.locator("table.judge-panel thead th[data-judge]")).to_have_count(3)

    submit_form(
        page,
        "judge-panel",
        {"judge": [O1_MINI_JUDGE, SMOL], "slice": "source", "resamples": "300"},
    )
    page.wait_for_url(re.compile(r".*/judges\?judge=.*slice=source.*"))
    heads = page.locator("table.judge-panel thead th[data-judge]")
    expect(heads).to_have_count(2)
    value, retained = _o1_mini_first_slot()
    column = [h.get_attribute("data-judge") for h in heads.all()].index(O1_MINI_JUDGE)
    cell = page.locator('tr[data-figure="first_slot_preference"] td.num').nth(column)
    expect(cell).to_contain_text(f"{value:.3f}")
    expect(cell.locator(".ci")).to_have_count(1)
    retained_cell = page.locator('tr[data-figure="retained"] td.num').nth(column)
    expect(retained_cell).to_have_text(f"{retained:,}")

    # The two judges' paired differences on the pairs both retained, and the analysis set.
    smol = recorded_verdicts()[SMOL]
    shared = sum("invalid" not in (o["AB"]["choice"], o["BA"]["choice"]) for o in smol.values())
    caption = page.locator("table.judge-differences caption")
    expect(caption).to_have_count(1)
    expect(caption).to_contain_text(f"on {shared} shared pairs")
    expect(page.locator("p.analysis-size")).to_contain_text(f"{shared} pairs")
    gate = page.locator(f'table.judge-retention tr[data-judge="{O1_MINI_JUDGE}"] td.probe-gate')
    expect(gate).to_have_text(re.compile(r"estimable|refused: .+"))
    assert errors == []
    context.close()
