"""The review screen in headless Chromium: blind for every role, a logged reveal, the vote bar.

A reviewer inside a blind queue sees no label, vote or other person's note before voting;
revealing an item is a click that is logged (a note under the reviewer's name) and shows them.
The vote buttons and key map stay in view however far the panes scroll; the instructions show
until dismissed, per queue. "New queue" on /queues leads to the form, which is submitted.
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
from app.ingest.judgebench import import_judgebench
from app.services.accounts.users import Principal
from app.services.evidence.resolution import VOTE
from app.services.review import queues
from app.services.review.review_actions import NewQueue, create_queue_from_source
from app.services.review.review_views import reveal_note
from app.settings import Settings
from app.tables import Comment, Instance, ReviewQueue, Role, TokenKind, User
from tests.browser.test_pages import browser
from tests.ingest.test_helpers import O1_MINI, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.support.auth_support import PASSWORD, ensure_user, token_for
from tests.support.form_support import submit_form
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]  # the shared Chromium fixture, imported so pytest finds it here

BENCH = "judgebench"
REWARD = "reward_model/Skywork_Skywork-Reward-Gemma-2-27B"
INSTRUCTIONS = "Pick the response that answers the question correctly."


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    """A server on its own SQLite store holding JudgeBench, a reviewer and an annotator."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("browser-blind"))
    engine = make_engine(settings)
    migrate.upgrade(engine)
    with transaction(session_factory(engine)) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])
    engine.dispose()
    for name, role in (("rita", "reviewer"), ("ann", "annotator")):
        ensure_user(settings, name, role, PASSWORD)
    with live_server(settings) as url:
        yield url, settings


def _signed_in(browser: Any, url: str, settings: Settings, name: str, role: str) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{url}/signin/{token_for(settings, name, role, TokenKind.signin)}")
    page.click("#use-link")
    expect(page).not_to_have_url(re.compile(r"/signin/"))  # home, or the queues for annotators
    return page


def _blind_queue_with_a_vote(settings: Settings) -> tuple[int, int]:
    """A blind queue with instructions; ann voted B on its first item. (queue id, item id)."""
    engine = make_engine(settings)
    with transaction(session_factory(engine)) as session:
        new = NewQueue(
            BENCH, "blind check", "reference", "filter", overlap_k=2, blind=True,
            instructions=INSTRUCTIONS,
        )  # fmt: skip
        queue = create_queue_from_source(session, new, "rita")
        user = session.scalar(select(User).where(User.name == "ann"))
        assert user is not None
        ann = Principal(user.id, "ann", Role.annotator, token_id=0)
        item = queues.next_item(session, queue, ann)
        assert item is not None
        version = queues.label_version(session, item, "reference")
        queues.record(session, queue, item, ann, kind=VOTE, value="B", seen_version=version)
        ids = queue.id, item
    engine.dispose()
    return ids


def _assert_blind(page: Any) -> None:
    """No label, vote, voter, detector output or other person's note on the page."""
    text = page.locator("main").inner_text()
    for anchor in ("Original", "resolved", "ann: B", "Votes:", REWARD, "adjudicated"):
        assert anchor not in text, anchor
    expect(page.locator("#adjudicate-form")).to_have_count(0)


def test_blind_for_the_reviewer_until_a_logged_reveal(
    browser: Any, served: tuple[str, Settings]
) -> None:
    url, settings = served
    queue_id, item = _blind_queue_with_a_vote(settings)
    page = _signed_in(browser, url, settings, "rita", "reviewer")
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.goto(f"{url}/queues/{queue_id}/items/{item}")
    _assert_blind(page)
    # Responses are A/B, as everywhere else.
    titles = page.locator(".review-texts .block-title").all_inner_texts()
    assert "Response A" in titles and "Response B" in titles
    # Instructions show until dismissed; the dismissal is remembered for this queue.
    expect(page.locator("#instructions")).to_be_visible()
    expect(page.locator("#instructions")).to_contain_text(INSTRUCTIONS)
    page.click("#instructions-dismiss")
    expect(page.locator("#instructions")).to_be_hidden()
    page.reload()
    expect(page.locator("#instructions")).to_be_hidden()
    page.click("#instructions-show")
    expect(page.locator("#instructions")).to_be_visible()
    # The vote buttons and the key map stay in view at the bottom of the tall panes.
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    assert page.evaluate("window.scrollY") > 0, "the page should be taller than the window"
    for pinned in ("#vote-form button.choice >> nth=0", "#keymap"):
        box = page.locator(pinned).bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 800, pinned
    # Voting blind moves on to the next item, blind too.
    page.locator("body").press("1")
    expect(page.locator("h1.id")).not_to_have_text(re.compile(r"^$"))
    expect(page).not_to_have_url(re.compile(rf"/items/{item}$"))
    _assert_blind(page)
    # Back on the first item: the reveal is a click, logged as a note under her name.
    page.goto(f"{url}/queues/{queue_id}/items/{item}")
    _assert_blind(page)
    submit_form(page, "queue-reveal")
    expect(page.locator("#labels")).to_contain_text("Original")
    expect(page.locator("#labels")).to_contain_text("ann: B")
    expect(page.locator("#adjudicate-form")).to_be_visible()
    engine = make_engine(settings)
    with transaction(session_factory(engine)) as session:
        queue = session.get(ReviewQueue, queue_id)
        assert queue is not None
        logged = list(
            session.scalars(
                select(Comment).where(Comment.instance_id == item, Comment.author == "rita")
            )
        )
        note = reveal_note(queue)
    engine.dispose()
    assert [c.body for c in logged] == [note]
    expect(page.locator("#comments")).to_contain_text(note)
    # The annotator's view of the same item stays blind, the reveal note included.
    ann = _signed_in(browser, url, settings, "ann", "annotator")
    ann.goto(f"{url}/queues/{queue_id}/items/{item}")
    _assert_blind(ann)
    assert note not in ann.locator("main").inner_text()
    expect(ann.locator("#reveal-form")).to_have_count(0)
    assert problems == []
    page.context.close()
    ann.context.close()


def test_new_queue_from_the_list_of_queues(browser: Any, served: tuple[str, Settings]) -> None:
    url, settings = served
    page = _signed_in(browser, url, settings, "rita", "reviewer")
    page.goto(f"{url}/queues")
    page.click("#new-queue")
    # One benchmark: straight to its form.
    expect(page).to_have_url(re.compile(rf"/queues/new\?benchmark={BENCH}$"))
    form = page.locator("#queue-new-form")
    query = form.locator("input[name=query]")
    # The query field spans the form.
    form_box, query_box = form.bounding_box(), query.bounding_box()
    assert form_box is not None and query_box is not None
    assert query_box["width"] >= 0.9 * form_box["width"]
    page.fill("#queue-new-form input[name=name]", "from the queue list")
    form.locator("select[name=source]").select_option("filter")
    query.fill(f"score_detector={REWARD}&score_min=0.5")
    form.locator("input[name=overlap_k]").fill("1")
    form.locator("textarea[name=instructions]").fill(INSTRUCTIONS)
    submit_form(page, "queue-new")
    expect(page).to_have_url(re.compile(r"/queues/\d+$"))
    queue_id = int(page.url.rsplit("/", 1)[1])
    expect(page.locator("h1")).to_contain_text("from the queue list")
    engine = make_engine(settings)
    with transaction(session_factory(engine)) as session:
        queue = session.get(ReviewQueue, queue_id)
        assert queue is not None
        assert (queue.blind, queue.overlap_k, queue.instructions) == (True, 1, INSTRUCTIONS)
        assert queue.query == f"score_detector={REWARD}&score_min=0.5"
        n = len(queues.item_ids(session, queue))
    engine.dispose()
    assert 0 < n < 350
    page.context.close()


def test_the_queue_items_are_listed_a_page_at_a_time(
    browser: Any, served: tuple[str, Settings]
) -> None:
    """A 250-item queue lists 100 items a page; the pager swaps the list in place."""
    url, settings = served
    engine = make_engine(settings)
    with transaction(session_factory(engine)) as session:
        new = NewQueue(BENCH, "paged", "reference", "filter", overlap_k=1, size=250)
        queue = create_queue_from_source(session, new, "rita")
        queue_id = queue.id
        ext = dict(session.execute(select(Instance.id, Instance.external_id)).all())
        order = [ext[i] for i in queues.item_ids(session, queue)]
    engine.dispose()
    assert len(order) == 250
    page = _signed_in(browser, url, settings, "rita", "reviewer")
    page.goto(f"{url}/queues/{queue_id}")
    rows = page.locator("#queue-items tr[data-item]")
    expect(rows).to_have_count(100)
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.item)") == order[:100]
    expect(page.locator("#queue-items")).to_contain_text("Items 1\u2013100 of 250")
    page.locator("#queue-items .pager a[rel=next]").click()
    expect(page).to_have_url(re.compile(rf"/queues/{queue_id}\?page=2$"))
    expect(page.locator("#queue-items")).to_contain_text("Items 101\u2013200 of 250")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.item)") == order[100:200]
    # Swapped in place: one progress section and one item list, not a page inside the page.
    expect(page.locator("section.progress")).to_have_count(1)
    expect(page.locator("#queue-items")).to_have_count(1)
    page.locator("#queue-items .pager a[rel=last]").click()
    expect(page.locator("#queue-items")).to_contain_text("Items 201\u2013250 of 250")
    expect(rows).to_have_count(50)
    page.context.close()
