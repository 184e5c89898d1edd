"""The label-errors list in headless Chromium (issue 21 item 5), on bundled MMLU-Redux subjects.

Compact rows (20 and more in the window of a 1080-px-high screen at 1400 px wide), one score
column where score and confidence are the same number, the experts' verdict, ties spread over
subjects; ticked rows (or every row, by "select all") go to a new queue or to an existing one,
or are marked as defects, through the list's selection form.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from app import migrate
from app.db import make_engine, session_factory, transaction
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers
from app.services.review import queues
from app.settings import Settings
from app.tables import Instance, LabelEvent, ReviewQueue
from tests.browser.test_pages import browser
from tests.browser.test_review import _watch
from tests.conftest import DATA
from tests.support.auth_support import signed_in_context
from tests.support.form_support import submit_form
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]

BENCH = "mmlu"
SUBJECTS = [
    DATA / "mmlu-redux" / f"{s}.csv"
    for s in ("abstract_algebra", "astronomy", "college_physics", "world_religions")
]
# The window of a 1080-px-high screen at 1400 px wide, less the browser's own bars.
WINDOW = {"width": 1400, "height": 960}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    """A server on its own SQLite store: four MMLU-Redux subjects, ranked."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("browser-label-errors"))
    engine = make_engine(settings)
    migrate.upgrade(engine)
    factory = session_factory(engine)
    with transaction(factory) as session:
        import_mmlu_redux(session, SUBJECTS, BENCH)
    with transaction(factory) as session:
        inputs = rank_inputs(session, BENCH)
    with transaction(factory) as session:
        store_rankers(session, inputs, compute_rankers(inputs))
    engine.dispose()
    with live_server(settings) as url:
        yield url, settings


@pytest.fixture
def page(browser: Any, served: tuple[str, Settings]) -> Iterator[tuple[Any, list[str]]]:
    url, settings = served
    context = signed_in_context(browser, url, settings, viewport=WINDOW)
    pg = context.new_page()
    problems = _watch(pg)
    pg.goto(f"{url}/benchmarks/{BENCH}/disagreements")
    expect(pg.locator("#dq-mode")).to_have_value("label-errors")
    yield pg, problems
    context.close()


def _read(settings: Settings, query: Any) -> list[Any]:
    engine = make_engine(settings)
    try:
        with session_factory(engine)() as session:
            return list(session.execute(query).all())
    finally:
        engine.dispose()


def _row_ids(pg: Any) -> list[str]:
    """The instance ids of the listed rows (their checkboxes' values), in list order."""
    return [
        str(v)
        for v in pg.locator("table.disagreements input[name=item]").evaluate_all(
            "boxes => boxes.map(b => b.value)"
        )
    ]


def test_compact_rows_one_score_column_verdicts_and_spread_ties(
    page: tuple[Any, list[str]],
) -> None:
    pg, problems = page
    rows = pg.locator("table.disagreements tbody tr")
    expect(rows.first).to_be_visible()
    # Rows wholly inside the window, the page scrolled to its top.
    visible = pg.evaluate(
        """() => Array.from(document.querySelectorAll('table.disagreements tbody tr'))
                 .filter(r => r.getBoundingClientRect().bottom <= window.innerHeight).length"""
    )
    assert visible >= 20, visible
    heads = [h.strip() for h in pg.locator("table.disagreements thead th").all_inner_texts()]
    assert "Score" in heads and "Confidence" not in heads, heads
    assert "Experts" in heads
    # The experts' verdicts: "ok" or an error type on every row of these annotated subjects.
    verdicts = pg.locator("table.disagreements td.verdict").all_inner_texts()
    assert len(verdicts) == rows.count() and all(v.strip() for v in verdicts)
    assert any(v.strip() != "ok" for v in verdicts)
    # Ties spread over subjects: the top rows are not one subject's.
    top = [t.split(":")[0] for t in pg.locator("table.disagreements td.id a").all_inner_texts()]
    assert len(set(top[:4])) > 1, top[:8]
    assert problems == []


def test_select_all_then_a_new_queue_of_ticked_rows_and_more_added_to_it(
    page: tuple[Any, list[str]], served: tuple[str, Settings]
) -> None:
    pg, problems = page
    _, settings = served
    boxes = pg.locator("table.disagreements input[name=item]")
    pg.locator("input.select-all").check()
    expect(pg.locator("table.disagreements input[name=item]:checked")).to_have_count(boxes.count())
    pg.locator("input.select-all").uncheck()
    expect(pg.locator("table.disagreements input[name=item]:checked")).to_have_count(0)
    ids = _row_ids(pg)
    listed = pg.url
    submit_form(
        pg,
        "disagreement-selection",
        {"item": ids[:3], "queue": "new", "queue_name": "picked rows"},
        button="button.to-queue",
    )
    expect(pg).to_have_url(re.compile(r"/queues/\d+$"))
    queue_id = int(pg.url.rsplit("/", 1)[1])
    expect(pg.locator("h1")).to_contain_text("picked rows")
    # Back on the list, two more rows go to the queue just made (picked by its name).
    pg.goto(listed)
    submit_form(
        pg,
        "disagreement-selection",
        {"item": [ids[2], ids[5], ids[7]], "queue": "picked rows (reference)"},
        button="button.to-queue",
    )
    expect(pg).to_have_url(re.compile(r"/disagreements\?.*#results$|/disagreements#results$"))
    engine = make_engine(settings)
    try:
        with session_factory(engine)() as session:
            queue = session.get_one(ReviewQueue, queue_id)
            members = [str(i) for i in queues.item_ids(session, queue)]
            assert (queue.source, queue.label_name) == ("selection", "reference")
    finally:
        engine.dispose()
    assert members == [*ids[:3], ids[5], ids[7]]
    assert problems == []


def test_ticked_rows_marked_as_defects(
    page: tuple[Any, list[str]], served: tuple[str, Settings]
) -> None:
    pg, problems = page
    _, settings = served
    ids = _row_ids(pg)[10:12]
    submit_form(
        pg,
        "disagreement-selection",
        {"item": ids, "reason": "two options are right <b>", "tag": "multiple correct answers"},
        button="button.mark-defects",
    )
    marked = pg.locator("table.disagreements tr.marked input[name=item]")
    expect(marked).to_have_count(2)
    assert sorted(marked.evaluate_all("boxes => boxes.map(b => b.value)")) == sorted(ids)
    events = _read(
        settings,
        select(LabelEvent.instance_id, LabelEvent.value, LabelEvent.reason, LabelEvent.tags)
        .join(Instance, Instance.id == LabelEvent.instance_id)
        .where(LabelEvent.label_name == "defect", LabelEvent.source == "adjudication"),
    )
    assert sorted((str(i), v, r, t) for i, v, r, t in events) == sorted(
        (i, "1", "two options are right <b>", ["multiple correct answers"]) for i in ids
    )
    assert problems == []


def test_an_empty_selection_is_refused_with_its_reason(page: tuple[Any, list[str]]) -> None:
    pg, _ = page
    answer = submit_form(
        pg,
        "disagreement-selection",
        {"reason": "no rows"},
        button="button.mark-defects",
        refused=422,
    )
    assert "select at least one item" in answer.text()
