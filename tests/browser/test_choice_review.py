"""A multiple-choice audit end to end in headless Chromium, on the bundled MMLU-Redux subjects.

The reviewer opens the label-errors list (its default ranker), follows the top item (option
bars, the experts' annotation), builds a queue from the list; an annotator votes an option by
key; the reviewer adjudicates "no correct option" with a taxonomy tag; the defect report counts
the tag; the corrected export leaves the item out and its changelog lists it. Paging the list
meets no console error or CSP violation, and its form sends a bad value once.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from app import migrate
from app.db import make_engine, session_factory, transaction
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers
from app.settings import Settings
from app.tables import Instance, LabelEvent, TokenKind
from tests.browser.test_pages import browser
from tests.browser.test_review import _password_sign_in, _watch
from tests.conftest import DATA
from tests.support.auth_support import PASSWORD, ensure_user, token_for
from tests.support.form_support import submit_form
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]

BENCH = "mmlu"
SUBJECTS = [DATA / "mmlu-redux" / f"{s}.csv" for s in ("astronomy", "college_physics")]
SHOTS = Path("/tmp")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    """A server on its own SQLite store: two MMLU-Redux subjects, ranked; two users."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("browser-choice"))
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
    for name, role in (("rita", "reviewer"), ("ann", "annotator")):
        ensure_user(settings, name, role, PASSWORD)
    with live_server(settings) as url:
        yield url, settings


def test_choice_audit_walkthrough(
    browser: Any, served: tuple[str, Settings], tmp_path: Path
) -> None:
    url, settings = served
    rita_ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    rita = rita_ctx.new_page()
    problems = _watch(rita)
    rita.goto(f"{url}/signin/{token_for(settings, 'rita', 'reviewer', TokenKind.signin)}")
    rita.click("#use-link")
    # The list opens on label-errors with the default ranker, votes beside each item.
    rita.goto(f"{url}/benchmarks/{BENCH}/disagreements")
    expect(rita.locator("#dq-mode")).to_have_value("label-errors")
    first = rita.locator("table.disagreements tbody tr").first
    expect(first.locator(".vote").first).to_be_visible()
    top = first.locator("td.id a").inner_text()
    rita.screenshot(path=str(SHOTS / "appellate-label-errors.png"), full_page=False)
    # The top item: options with the label marked, a bar per option, the experts' verdict.
    first.locator("td.id a").click()
    expect(rita.locator("h1.id")).to_have_text(top)
    expect(rita.locator("table.option-votes meter.share")).to_have_count(4)
    expect(rita.locator("tr.option.is-label")).to_have_count(1)
    expect(rita.locator("p.errata")).to_be_visible()
    rita.screenshot(path=str(SHOTS / "appellate-choice-item.png"), full_page=True)
    # A queue from the list (its first 200 items), one annotator per item.
    rita.go_back()
    rita.locator("a.queue-link").click()
    expect(rita.locator("select[name=source]")).to_have_value("disagreements")
    rita.fill("input[name=name]", "suspect labels")
    rita.fill("input[name=overlap_k]", "1")
    rita.click("form.queue-form button[type=submit]")
    expect(rita).to_have_url(re.compile(r"/queues/\d+$"))
    queue_id = int(rita.url.rsplit("/", 1)[1])

    # The annotator sees the question and its lettered options, and votes B by key 2.
    ann_ctx, ann, ann_problems = _password_sign_in(browser, url, "ann")
    ann.goto(f"{url}/queues/{queue_id}/next")
    # Reviewers are spread over the queue: the item is one of the list's, not always its top.
    top = ann.locator("h1.id").inner_text()
    expect(ann.locator("ol.review-options li")).to_have_count(4)
    expect(ann.locator("button.choice[data-key='5']")).to_contain_text("no correct option")
    ann.locator("body").press("2")
    expect(ann.locator("h1.id")).not_to_have_text(top)

    # The reviewer adjudicates "no correct option" with the taxonomy's tag.
    engine = make_engine(settings)
    with transaction(session_factory(engine)) as session:
        iid = session.scalar(select(Instance.id).where(Instance.external_id == top))
    engine.dispose()
    rita.goto(f"{url}/queues/{queue_id}/items/{iid}")
    # The queue is blind for every role: the reviewer reveals the item (a logged click) first.
    submit_form(rita, "queue-reveal")
    form = rita.locator("#adjudicate-form")
    form.locator("input[name=reason]").fill("two options are right")
    form.locator("input[name=tags][value='no correct answer']").check()
    form.locator("button.adjudicate[value='no correct option']").click()
    expect(rita.locator("#adjudicate-form")).to_be_visible()

    # Before you accept: the queue page loads each model's accuracy and macro-F1 on the
    # original and the resolved labels, and the rankers on the defect labels (it showed the
    # raw "not a known binary vocabulary" message on a choice benchmark).
    rita.goto(f"{url}/queues/{queue_id}")
    section = rita.locator("#before-accept")
    expect(section.locator("table.answers")).to_be_visible()
    expect(section).to_contain_text("1 item of mmlu change label under review")
    expect(section.locator("table.rankers tbody tr")).not_to_have_count(0)
    assert "vocabulary" not in section.inner_text()

    # The defect report counts the tag; the corrected export leaves the item out.
    rita.goto(f"{url}/benchmarks/{BENCH}/report?k=1")
    report = rita.locator("main").inner_text()
    assert "no correct answer" in report and top in report
    assert "vocabulary" not in report and "Macro-F1 resolved" in report
    export = rita.locator(f"form[action='/benchmarks/{BENCH}/export']")
    export.locator("select[name=format]").select_option("jsonl")
    export.locator("select[name=labels]").select_option("resolved")
    with rita.expect_download() as info:
        export.locator("button", has_text="Download export").click()
    path = tmp_path / "export.jsonl"
    info.value.save_as(path)
    rows = {r["external_id"] for r in map(json.loads, path.read_text().splitlines())}
    assert len(rows) == 199 and top not in rows
    with rita.expect_download() as info:
        export.locator("button", has_text="changelog").click()
    log = tmp_path / "changelog.csv"
    info.value.save_as(log)
    changed = [r for r in csv.DictReader(log.open()) if r["external_id"] == top]
    assert [(r["resolved"], r["rule"]) for r in changed] == [("no correct option", "adjudication")]
    assert problems == [] and ann_problems == []
    for ctx in (rita_ctx, ann_ctx):
        ctx.close()


def test_a_choice_queue_is_sized_tagged_and_adjudicated_with_evidence(
    browser: Any, served: tuple[str, Settings]
) -> None:
    """A queue sized by the form's preview, with its own tags; its items show the evidence.

    Issue 21 item 3: the new-queue form previews how many items match and offers the kind's
    tags; the item page shows which models chose each option and the rankers' scores.
    """
    url, settings = served
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    rita = ctx.new_page()
    problems = _watch(rita)
    rita.goto(f"{url}/signin/{token_for(settings, 'rita', 'reviewer', TokenKind.signin)}")
    rita.click("#use-link")
    rita.goto(f"{url}/benchmarks/{BENCH}/queues/new?source=filter&query=")
    form = rita.locator("#queue-new-form")
    preview = form.locator("#queue-preview")
    # Two subjects: 200 items match, and the queue takes all of them at the default size.
    expect(preview).to_have_text("200 items match; the queue takes all 200.")
    tags = form.locator("textarea[name=tags]")
    expect(tags).to_contain_text("bad options clarity")
    assert "persona not adopted" not in tags.input_value()
    # Typing a size asks the server again (htmx): the preview follows.
    form.locator("input[name=size]").fill("25")
    expect(preview).to_have_text("200 items match; the queue takes the first 25.")
    form.locator("input[name=query]").fill("q=astronomy")
    expect(preview).to_have_text("100 items match; the queue takes the first 25.")
    submit_form(
        rita,
        "queue-new",
        {"name": "sized and tagged", "overlap_k": "1", "blind": False,
         "tags": "wrong ground truth\nneeds a figure"},
    )  # fmt: skip
    expect(rita).to_have_url(re.compile(r"/queues/\d+$"))
    queue_id = int(rita.url.rsplit("/", 1)[1])
    expect(rita.locator("main")).to_contain_text("0 of 25")

    rita.goto(f"{url}/queues/{queue_id}/next")
    evidence = rita.locator("#evidence")
    expect(evidence.locator("table.evidence-options tbody tr")).to_have_count(4)
    expect(evidence.locator("tr.option.is-label")).to_have_count(1)
    # Every model is named under the option it chose.
    named = evidence.locator("td.models").all_inner_texts()
    models = [m for cell in named for m in cell.split(", ") if m != "—"]
    assert len(models) >= 10 and len(set(models)) == len(models)
    expect(evidence.locator("table.evidence-rankers tbody tr")).not_to_have_count(0)
    expect(evidence.locator("tr[data-ranker='ranker:consensus'] .score")).to_be_visible()
    # The queue's own tags, nothing else; a vote carries one.
    expect(rita.locator("#tags input[name=tags]")).to_have_count(2)
    assert rita.locator("#tags input[value='persona not adopted']").count() == 0
    top = rita.locator("h1.id").inner_text()
    rita.locator("#tags input[value='needs a figure']").check()
    rita.locator("button.choice[data-key='1']").click()
    expect(rita.locator("h1.id")).not_to_have_text(top)
    engine = make_engine(settings)
    with transaction(session_factory(engine)) as session:
        tagged = session.scalars(
            select(LabelEvent.tags)
            .join(Instance, Instance.id == LabelEvent.instance_id)
            .where(Instance.external_id == top, LabelEvent.source == "vote")
        ).all()
    engine.dispose()
    assert tagged == [["needs a figure"]]
    assert problems == []
    ctx.close()


def test_paging_the_label_errors_list_is_quiet_and_sends_once(
    browser: Any, served: tuple[str, Settings]
) -> None:
    """Issue 21 item 7: paging the list logs no (CSP) error; a bad value is sent once."""
    url, settings = served
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    # Every CSP violation the page meets, whether or not the console reports it as an error.
    context.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation', e =>"
        " window.__csp.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + e.sourceFile"
        " + ':' + e.lineNumber));"
    )
    page = context.new_page()
    problems = _watch(page)
    page.on("pageerror", lambda e: problems.append(str(e)))
    path = f"/benchmarks/{BENCH}/disagreements"
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if path in r.url else None)
    try:
        page.goto(f"{url}/signin/{token_for(settings, 'rita', 'reviewer', TokenKind.signin)}")
        page.click("#use-link")
        page.goto(f"{url}{path}")
        expect(page.locator("#dq-mode")).to_have_value("label-errors")
        first = page.locator("table.disagreements td.id a").all_inner_texts()
        assert len(first) == 100
        with page.expect_response(lambda r: "page=2" in r.url):
            page.locator("nav.pager a[rel=next]").click()
        page.wait_for_function("() => document.querySelector('.htmx-request') === null")
        expect(page).to_have_url(re.compile(r"page=2"))
        second = page.locator("table.disagreements td.id a").all_inner_texts()
        assert second and not set(second) & set(first)
        expect(page.locator("table.disagreements td.num.muted").first).to_have_text("101")
        with page.expect_response(lambda r: path in r.url):
            page.locator("nav.pager a[rel=prev]").click()
        page.wait_for_function("() => document.querySelector('.htmx-request') === null")
        assert page.locator("table.disagreements td.id a").all_inner_texts() == first
        assert problems == [] and page.evaluate("window.__csp") == []
        # A bad value (Enter in the field: a change and a submit) goes to the server once.
        sent.clear()
        page.fill("#dq-limit", "-1")
        with page.expect_response(lambda r: "limit=-1" in r.url):
            page.press("#dq-limit", "Enter")
        expect(page.locator("#request-error")).to_be_visible()
        page.wait_for_timeout(600)  # a second request would have left by now
        assert [u for u in sent if "limit=-1" in u] == [sent[0]], sent
        assert len(sent) == 1, sent
    finally:
        context.close()
