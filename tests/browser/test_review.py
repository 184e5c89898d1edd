"""The review workflow end to end in headless Chromium, and untrusted text staying inert.

Sign in, build a queue from confident disagreements, relabel three items by keyboard only,
undo one, a second annotator votes, a reviewer adjudicates, the defect report shows the
changes, and the corrected export downloads and parses.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Download, expect
from sqlalchemy import select

from app import migrate
from app.db import make_engine, session_factory, transaction
from app.ingest.judgebench import import_judgebench
from app.services.evidence.labels import append_label, current_labels
from app.settings import Settings
from app.tables import Instance, ReviewQueue, TokenKind
from tests.browser.test_pages import browser
from tests.ingest.test_helpers import O1_MINI, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.support.auth_support import PASSWORD, ensure_user, token_for
from tests.support.form_support import submit_form
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]  # the shared Chromium fixture, imported so pytest finds it here

REWARD = "reward_model/Skywork_Skywork-Reward-Gemma-2-27B"
BENCH = "judgebench"
SHOTS = Path("/tmp")
HOSTILE = (
    '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    '<a href="javascript:window.__pwned = 3" id="evil-link">click</a>'
    '<div onmouseover="window.__pwned = 4" id="evil-div">hover</div>'
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    """A server on its own SQLite store holding JudgeBench, a reviewer and two annotators."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("browser-review"))
    engine = make_engine(settings)
    migrate.upgrade(engine)
    with transaction(session_factory(engine)) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])
    engine.dispose()
    for name, role in (("rita", "reviewer"), ("ann", "annotator"), ("bob", "annotator")):
        ensure_user(settings, name, role, PASSWORD)
    with live_server(settings) as url:
        yield url, settings


def _watch(page: Any) -> list[str]:
    problems: list[str] = []
    page.on("dialog", lambda d: (problems.append(f"dialog {d.message}"), d.dismiss()))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.set_default_timeout(15_000)
    return problems


def _password_sign_in(browser: Any, url: str, name: str) -> tuple[Any, Any, list[str]]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    problems = _watch(page)
    page.goto(f"{url}/queues")  # signed out: sent to the sign-in form, and back afterwards
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fqueues$"))
    submit_form(page, "sign-in", {"name": name, "password": PASSWORD})
    expect(page).to_have_url(f"{url}/queues")
    return context, page, problems


def _vote_by_key(page: Any, key: str) -> str:
    """Press ``key`` on the item page; returns the external id of the item voted on."""
    external_id = page.locator("h1.id").inner_text()
    page.locator("body").press(key)
    expect(page.locator("h1.id")).not_to_have_text(external_id)
    return external_id


def _originals(settings: Settings, external_ids: list[str]) -> dict[str, str]:
    engine = make_engine(settings)
    with transaction(session_factory(engine)) as session:
        rows = dict(
            session.execute(
                select(Instance.external_id, Instance.id).where(
                    Instance.external_id.in_(external_ids)
                )
            ).all()
        )
        labels = current_labels(session, list(rows.values()), ["reference"])
    engine.dispose()
    return {ext: labels[iid]["reference"] for ext, iid in rows.items()}


def test_review_walkthrough(browser: Any, served: tuple[str, Settings], tmp_path: Path) -> None:
    url, settings = served
    # The reviewer signs in with a one-time link and builds a queue from the disagreements.
    link = token_for(settings, "rita", "reviewer", TokenKind.signin)
    rita_ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    rita = rita_ctx.new_page()
    rita_problems = _watch(rita)
    rita.goto(f"{url}/signin/{link}")
    submit_form(rita, "sign-in-link")
    expect(rita).to_have_url(f"{url}/")
    rita.goto(
        f"{url}/benchmarks/{BENCH}/disagreements?detector={quote(REWARD, safe='')}"
        "&min_confidence=0.9"
    )
    n_disagreements = rita.locator("table.disagreements tbody tr").count()
    assert n_disagreements >= 4
    rita.click("a.queue-link")
    expect(rita.locator("select[name=source]")).to_have_value("disagreements")
    submit_form(rita, "queue-new", {"name": "confident RM disagreements"})
    expect(rita).to_have_url(re.compile(r"/queues/\d+$"))
    queue_id = int(rita.url.rsplit("/", 1)[1])
    assert f"{n_disagreements} items" in rita.locator("main").inner_text()
    engine = make_engine(settings)
    with transaction(session_factory(engine)) as session:
        queue = session.get(ReviewQueue, queue_id)
        assert queue is not None and queue.blind and queue.overlap_k == 2
        choices = list(queue.choices)
    engine.dispose()

    # The annotator works by keyboard only: three votes, then undo the last one.
    ann_ctx, ann, ann_problems = _password_sign_in(browser, url, "ann")
    ann.goto(f"{url}/queues/{queue_id}/next")
    originals: dict[str, str] = {}
    voted: list[tuple[str, str]] = []
    for _ in range(3):
        ext = ann.locator("h1.id").inner_text()
        originals.update(_originals(settings, [ext]))
        # Vote for a value other than the original (the annotator cannot see it; we can).
        value = next(c for c in choices if c != originals[ext])
        key = str(choices.index(value) + 1)
        assert _vote_by_key(ann, key) == ext
        voted.append((ext, value))
    ann.locator("body").press("u")
    expect(ann.locator("#undone")).to_be_visible()
    expect(ann.locator("h1.id")).to_have_text(voted[2][0])
    # Blind mode: no label, vote or detector output on the annotator's page.
    text = ann.locator("main").inner_text()
    assert "Original" not in text and REWARD not in text and "resolved" not in text
    ann.locator("body").press("?")
    expect(ann.locator("#help")).to_be_visible()
    ann.screenshot(path=str(SHOTS / "appellate-review-item.png"), full_page=False)

    # A second annotator agrees with the first vote (k = 2: it resolves).
    bob_ctx, bob, bob_problems = _password_sign_in(browser, url, "bob")
    bob.goto(f"{url}/queues/{queue_id}/next")
    # Sent to an item nobody voted on yet; he opens ann's first one from the queue instead.
    expect(bob.locator("h1.id")).not_to_have_text(voted[0][0])
    expect(bob.locator("h1.id")).not_to_have_text(voted[1][0])
    engine = make_engine(settings)
    with transaction(session_factory(engine)) as session:
        first_id = session.scalar(select(Instance.id).where(Instance.external_id == voted[0][0]))
    engine.dispose()
    bob.goto(f"{url}/queues/{queue_id}/items/{first_id}")
    expect(bob.locator("h1.id")).to_have_text(voted[0][0])
    _vote_by_key(bob, str(choices.index(voted[0][1]) + 1))

    # The reviewer adjudicates the second item with a reason and a defect tag.
    engine = make_engine(settings)
    with transaction(session_factory(engine)) as session:
        second_id = session.scalar(select(Instance.id).where(Instance.external_id == voted[1][0]))
    engine.dispose()
    rita.goto(f"{url}/queues/{queue_id}/items/{second_id}")
    # Blind for the reviewer too: she reveals the item (logged) to adjudicate it.
    expect(rita.locator("#adjudicate-form")).to_have_count(0)
    rita.click("#reveal-form button")
    form = rita.locator("#adjudicate-form")
    form.locator("input[name=reason]").fill("the reference key is wrong <b>really</b>")
    form.locator("input[name=tags][value='wrong reference']").check()
    submit_form(rita, "queue-adjudicate", button=f"button.adjudicate[value='{voted[1][1]}']")
    expect(rita.locator("#adjudicate-form")).to_be_visible()
    rita.goto(f"{url}/queues/{queue_id}")
    expect(rita.locator("#complete")).to_have_text("2")
    # The metrics comparison is loaded after the page (htmx) and replaces its link.
    section = rita.locator("#before-accept")
    expect(section.locator("table.compare tbody tr")).not_to_have_count(0)
    expect(section.locator("#comparison-link")).to_have_count(0)
    expect(section).to_contain_text(f"2 items of {BENCH} change label")
    expect(section.locator("table.compare")).to_contain_text(REWARD)
    # The agreement is computed when asked for: the link swaps the section in (htmx).
    expect(rita.locator("#alpha")).to_have_count(0)
    rita.locator("#agreement-link").click()
    expect(rita.locator("#agreement #alpha")).to_be_visible()
    expect(rita.locator("#agreement table.grid").first).to_contain_text("ann")
    expect(rita).to_have_url(re.compile(rf"/queues/{queue_id}$"))
    rita.screenshot(path=str(SHOTS / "appellate-review-queue.png"), full_page=True)

    # The defect report lists both changes with their reasons and tag counts.
    rita.goto(f"{url}/benchmarks/{BENCH}/report?k=2")
    report = rita.locator("main").inner_text()
    for ext, _ in voted[:2]:
        assert ext in report
    assert "the reference key is wrong <b>really</b>" in report
    assert "wrong reference" in report
    rita.screenshot(path=str(SHOTS / "appellate-defect-report.png"), full_page=True)

    # The corrected benchmark downloads from the page and parses.
    export = rita.locator(f"form[action='/benchmarks/{BENCH}/export']")
    export.locator("select[name=format]").select_option("jsonl")
    export.locator("select[name=labels]").select_option("resolved")
    download = submit_form(rita, "export", download=True)
    assert isinstance(download, Download)
    path = tmp_path / "export.jsonl"
    download.save_as(path)
    rows = {r["external_id"]: r for r in map(json.loads, path.read_text().splitlines())}
    assert len(rows) == 350
    for ext, value in voted[:2]:
        assert rows[ext]["label:reference"] == value
        assert rows[ext]["original:reference"] == originals[ext]
    # The undone vote changed nothing.
    assert rows[voted[2][0]]["label:reference"] == originals[voted[2][0]]
    changelog = submit_form(rita, "export", button="button:has-text('changelog')", download=True)
    assert isinstance(changelog, Download)
    log = tmp_path / "changelog.csv"
    changelog.save_as(log)
    changed = {r["external_id"]: r for r in csv.DictReader(log.open())}
    assert set(changed) == {voted[0][0], voted[1][0]}
    assert changed[voted[1][0]]["rule"] == "adjudication"
    assert changed[voted[0][0]]["rule"] == "unanimous-votes"
    assert rita_problems == [] and ann_problems == [] and bob_problems == []
    for ctx in (rita_ctx, ann_ctx, bob_ctx):
        ctx.close()


def test_hostile_text_renders_inert(browser: Any, served: tuple[str, Settings]) -> None:
    url, settings = served
    engine = make_engine(settings)
    with transaction(session_factory(engine)) as session:
        inst = session.scalar(select(Instance).order_by(Instance.id).limit(1))
        assert inst is not None
        # Model text is untrusted: put markup in the item itself, a label reason and the name.
        inst.payload = {**inst.payload, "response_a": HOSTILE, "prompt": HOSTILE}
        append_label(session, inst.id, "reference", "A", source="import", reason=HOSTILE)
        ext, iid = inst.external_id, inst.id
    engine.dispose()
    context = browser.new_context()
    page = context.new_page()
    problems = _watch(page)
    page.goto(f"{url}/signin/{token_for(settings, 'rita', 'reviewer', TokenKind.signin)}")
    page.click("#use-link")
    page.goto(f"{url}/benchmarks/{BENCH}/instances/{quote(ext, safe='')}")
    submit_form(page, "instance-note", {"body": HOSTILE})
    expect(page.locator("#comments .comment .model-text")).to_have_text(HOSTILE)
    queue_page = f"{url}/benchmarks/{BENCH}/queues/new?source=filter&query="
    page.goto(queue_page)
    page.fill("input[name=name]", "hostile")
    # Every item, the hostile one included (a queue takes the first 200 unless told).
    page.fill("input[name=size]", "10000")
    page.uncheck("input[name=blind]")
    page.click("form.queue-form button[type=submit]")
    qid = int(page.url.rsplit("/", 1)[1])
    for target in (
        f"{url}/benchmarks/{BENCH}/instances/{quote(ext, safe='')}",
        f"{url}/queues/{qid}/items/{iid}",
        f"{url}/benchmarks/{BENCH}?q=window.__pwned",
    ):
        page.goto(target)
        page.locator("body").hover()
        for hostile in ("#evil-div", "#evil-link", "main img[src=x]", "main script"):
            assert page.locator(hostile).count() == 0, (target, hostile)
        assert page.evaluate("window.__pwned") is None, target
    page.goto(f"{url}/queues/{qid}/items/{iid}")
    assert page.locator(".review-texts .model-text").first.inner_text() == HOSTILE
    assert problems == []
    context.close()
