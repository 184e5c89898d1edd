"""Every form of the app submitted in headless Chromium with valid input, and one that fails.

Each form is filled and submitted through the page by
:func:`tests.support.form_support.submit_form`, which fails on any 4xx/5xx answer and records the
form as submitted; the inventory test (tests/web/test_forms_inventory.py) checks that every form of
the templates was. Jobs a form queues are checked in the database (the judge job is also run
in-process, as the worker would, so its retry and output links are exercised too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Download, expect
from sqlalchemy import select

from app.db import transaction
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.store import Store
from app.tables import (
    AuthToken,
    Comment,
    Detector,
    Instance,
    Job,
    LabelEvent,
    ReviewQueue,
    TokenKind,
    User,
)
from tests.browser.test_judge_nav import NEW_JUDGE, _register_model, _run_judge_job
from tests.browser.test_pages import browser
from tests.support import factories as f
from tests.support.auth_support import PASSWORD, ensure_user, signed_in_context, token_for
from tests.support.form_support import form_locator, submit_form
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]  # the shared Chromium fixture, imported so pytest finds it here

ADMIN = "browser-admin"  # signed_in_context's user of role admin
FROZEN = f.PROBE  # given a frozen artifact below, so the apply form is enabled


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Store]]:
    """A server on its own SQLite store: the three small benchmarks, a model, a frozen probe."""
    tmp = tmp_path_factory.mktemp("browser-forms")
    settings = Settings(data_dir=tmp, database_url=f"sqlite:///{tmp / 'forms.sqlite3'}")
    store = Store.open(settings)
    f.seed_benchmarks(store.factory)
    _register_model(store.factory)
    with transaction(store.factory) as s:
        probe = s.scalar(select(Detector).where(Detector.name == FROZEN))
        assert probe is not None
        # A frozen lie probe (as probe fit-lie leaves one): the card form offers it too.
        probe.details = {
            "artifact": "probes/truth-layer12.npz", "benchmark": f.STATEMENTS, "kind": "lie",
            "extract": {"format": "text", "text_field": "statement", "position": "last"},
        }  # fmt: skip
    ensure_user(settings, "ada", "admin", PASSWORD)
    with live_server(settings) as url:
        yield url, store
    store.close()


@pytest.fixture
def admin(browser: Any, served: tuple[str, Store]) -> Iterator[Any]:
    """A page signed in as an admin (every form is open to them)."""
    url, store = served
    context = signed_in_context(
        browser, url, store.settings, role="admin", viewport={"width": 1280, "height": 900},
        accept_downloads=True,
    )  # fmt: skip
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    yield page
    context.close()
    assert problems == []


def _latest_job(store: Store) -> Job:
    with transaction(store.factory) as s:
        job = s.scalar(select(Job).order_by(Job.id.desc()).limit(1))
        assert job is not None
        s.expunge(job)
        return job


def _job_id(page: Any) -> int:
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"))
    return int(page.url.rsplit("/", 1)[1])


# --- signing in and out ----------------------------------------------------------------------


def test_sign_in_sign_out_and_sign_in_link(browser: Any, served: tuple[str, Store]) -> None:
    url, store = served
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{url}/jobs")  # signed out: the sign-in form, and back here afterwards
    expect(page).to_have_url(re.compile(r"/login\?next="))
    submit_form(page, "sign-in", {"name": "ada", "password": PASSWORD})
    expect(page).to_have_url(f"{url}/jobs")
    submit_form(page, "sign-out")
    expect(page).to_have_url(re.compile(r"/login"))
    page.goto(f"{url}/jobs")
    expect(page).to_have_url(re.compile(r"/login\?next="))  # the session ended
    page.goto(f"{url}/signin/{token_for(store.settings, 'ada', 'admin', TokenKind.signin)}")
    submit_form(page, "sign-in-link")
    expect(page).to_have_url(f"{url}/")
    expect(form_locator(page, "sign-out")).to_be_visible()
    context.close()


# --- account and users -------------------------------------------------------------------------


def test_account_and_token_forms(admin: Any, served: tuple[str, Store]) -> None:
    url, store = served
    admin.goto(f"{url}/account")
    submit_form(admin, "token-new", {"label": "laptop CLI"})
    expect(admin.locator("main")).to_contain_text("laptop CLI")
    row = admin.locator("tr", has_text="laptop CLI")
    submit_form(admin, "token-revoke", scope=row)
    expect(admin.locator("tr", has_text="laptop CLI")).to_have_count(0)
    # A new password ends every session of the user, this one included: sign in again.
    submit_form(admin, "account-password", {"password": "a long new password"})
    expect(admin).to_have_url(re.compile(r"/login"))
    with transaction(store.factory) as s:
        user = s.scalar(select(User).where(User.name == ADMIN))
        assert user is not None and user.password_hash
        token = s.scalar(select(AuthToken).where(AuthToken.label == "laptop CLI"))
        assert token is not None and token.revoked_at is not None


def test_user_admin_forms(admin: Any, served: tuple[str, Store]) -> None:
    url, store = served
    admin.goto(f"{url}/admin/users")
    submit_form(admin, "user-add", {"name": "newbie", "role": "reviewer"})
    expect(admin.locator("main")).to_contain_text("/signin/")  # their one-time link
    row = admin.locator("tr", has=admin.locator("td", has_text=re.compile(r"^newbie$")))
    submit_form(admin, "user-role", {"role": "annotator", "active": "false"}, scope=row)
    submit_form(admin, "user-link", scope=row)
    expect(admin.locator("main")).to_contain_text("/signin/")
    with transaction(store.factory) as s:
        user = s.scalar(select(User).where(User.name == "newbie"))
        assert user is not None and (user.role, user.active) == ("annotator", False)


# --- the read-only views' forms ------------------------------------------------------------------


def test_table_metrics_disagreement_and_report_forms(
    admin: Any, served: tuple[str, Store], tmp_path: Path
) -> None:
    url, _ = served
    admin.goto(f"{url}/benchmarks/{f.PAIRWISE}")
    submit_form(admin, "instance-filters", {"flip": "yes"})
    expect(admin.locator("#results td.id a")).to_have_count(2)
    assert "flip=yes" in admin.url

    admin.goto(f"{url}/benchmarks/{f.PAIRWISE}/metrics")
    submit_form(admin, "metric-filters", {"label": "reference", "resamples": "200"})
    expect(admin.locator("table.metric-matrix")).to_contain_text(f.RM_1)
    assert "resamples=200" in admin.url

    # The seeded reward models' scores are not probabilities: the judge's two orders are.
    admin.goto(f"{url}/benchmarks/{f.PAIRWISE}/disagreements?mode=judge-orders")
    submit_form(admin, "disagreement-filters", {"detector": f.JUDGE})
    expect(admin.locator("table.disagreements tbody tr").first).to_be_visible()
    expect(admin.locator("#results")).not_to_contain_text("Choose a detector")

    admin.goto(f"{url}/benchmarks/{f.PAIRWISE}/report")
    submit_form(admin, "report-filters", {"label": "reference", "k": "1"})
    assert "k=1" in admin.url
    got = submit_form(admin, "export", {"format": "jsonl", "labels": "resolved"}, download=True)
    assert isinstance(got, Download)
    path = tmp_path / "export.jsonl"
    got.save_as(path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["external_id"] for r in rows} == {p.external_id for p in f.PAIRS}
    changelog = submit_form(
        admin, "export", button="button[formaction$='changelog.csv']", download=True
    )
    assert isinstance(changelog, Download)
    assert changelog.suggested_filename.endswith(".csv")


def test_instance_note_form(admin: Any, served: tuple[str, Store]) -> None:
    url, store = served
    admin.goto(f"{url}/benchmarks/{f.PAIRWISE}/instances/pair-005")
    submit_form(admin, "instance-note", {"body": "the key looks <b>wrong</b>"})
    expect(admin.locator("#comments")).to_contain_text("the key looks <b>wrong</b>")
    with transaction(store.factory) as s:
        assert s.scalar(select(Comment.author).where(Comment.body.like("the key looks%"))) == ADMIN


def test_instance_relabel_form(browser: Any, served: tuple[str, Store]) -> None:
    """Issue 21 item 4: a reviewer fixes one label from its page, without a queue."""
    url, store = served
    context = signed_in_context(browser, url, store.settings, role="admin")
    admin, other = context.new_page(), context.new_page()
    problems: list[str] = []
    for pg in (admin, other):
        pg.set_default_timeout(15_000)
        pg.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        pg.on("pageerror", lambda e: problems.append(str(e)))
    page = f"{url}/benchmarks/{f.PAIRWISE}/instances/pair%2F002"
    admin.goto(page)
    # No reason: refused beside the form (the browser's own check is lifted, as a script would).
    admin.locator("#relabel-form input[name=reason]").evaluate("e => e.removeAttribute('required')")
    submit_form(admin, "instance-relabel", {"label": "reference", "value": "A"}, refused=422)
    expect(admin.locator("#relabel-error")).to_contain_text("reason")
    # A second page, loaded now, is stale once the first one relabels.
    other.goto(page)
    fix = {"label": "reference", "value": "A", "reason": "B is wrong"}
    submit_form(admin, "instance-relabel", fix)
    reference = admin.locator("#labels summary", has_text="reference")
    expect(reference).to_contain_text("→ A")
    expect(admin.locator("#labels")).to_contain_text("B is wrong")
    submit_form(other, "instance-relabel", {"label": "reference", "value": "B", "reason": "no, B"},
                refused=409)  # fmt: skip
    expect(other.locator("#relabel-error")).to_contain_text("changed since you opened it")
    context.close()
    # The two refusals, and nothing else, were errors.
    assert sorted(problems) == sorted(
        f"Failed to load resource: the server responded with a status of {status}"
        for status in ("409 (Conflict)", "422 (Unprocessable Entity)")
    )
    with transaction(store.factory) as s:
        events = s.execute(
            select(LabelEvent.value, LabelEvent.source, LabelEvent.author, LabelEvent.reason)
            .join(Instance, Instance.id == LabelEvent.instance_id)
            .where(Instance.external_id == "pair/002", LabelEvent.label_name == "reference")
            .order_by(LabelEvent.id)
        ).all()
    # Appended: the import's B is still there, the fix comes after it, no refusal wrote.
    assert [tuple(e) for e in events] == [
        ("B", "import", "", ""),
        ("A", "adjudication", "browser-admin", "B is wrong"),
    ]


# --- jobs ---------------------------------------------------------------------------------------


def test_judge_job_status_cancel_and_retry_forms(admin: Any, served: tuple[str, Store]) -> None:
    url, store = served
    admin.goto(f"{url}/benchmarks/{f.PAIRWISE}/judge")
    submit_form(admin, "judge", {"limit": "2", "seed": "1"})
    job_id = _job_id(admin)
    submit_form(admin, "job-cancel")
    expect(admin.locator("#job")).to_contain_text("cancelled")
    submit_form(admin, "job-retry")
    expect(form_locator(admin, "job-cancel")).to_be_visible()
    with transaction(store.factory) as s:
        assert job_queue.get_job(s, job_id).status == "queued"
    # The worker's part, in-process: the page stops polling and links to the judge's output.
    _run_judge_job(store.factory, job_id)
    expect(admin.get_by_role("link", name=f"Metrics of flip:{NEW_JUDGE}")).to_be_visible()

    admin.goto(f"{url}/jobs")
    submit_form(admin, "job-status", {"status": "done"})
    assert admin.url.endswith("/jobs?status=done")
    expect(admin.locator("#jobs-table")).to_contain_text(NEW_JUDGE)


def _queued(page: Any, store: Store) -> tuple[str, dict[str, Any]]:
    """(kind, params) of the job the page was sent to, the newest one."""
    job = _latest_job(store)
    assert job.id == _job_id(page)
    return job.kind, job.params


def test_probe_forms(admin: Any, served: tuple[str, Store]) -> None:
    url, store = served
    probes = f"{url}/probes"
    admin.goto(probes)
    submit_form(admin, "probe-fit", {"benchmark": f.PAIRWISE, "judge": f.JUDGE})
    fit = _queued(admin, store)
    assert (fit[1]["benchmark"], fit[1]["judge"], fit[1]["outer"]) == (f.PAIRWISE, f.JUDGE, 5)
    admin.goto(probes)
    lie = {"benchmark": f.STATEMENTS, "model": "smol", "name": "lie-probe", "layers": "1,2"}
    submit_form(admin, "probe-fit-lie", lie)
    fit_lie = _queued(admin, store)
    assert fit_lie[1]["name"] == "lie-probe" and fit_lie[1]["extract"]["layers"] == [1, 2]
    admin.goto(probes)
    submit_form(admin, "probe-datasets")
    build = _queued(admin, store)
    assert "builder" in build[1]
    admin.goto(probes)
    submit_form(admin, "probe-apply", {"probe": FROZEN, "benchmark": f.STATEMENTS})
    apply = _queued(admin, store)
    assert (apply[1]["probe"], apply[1]["benchmark"]) == (FROZEN, f.STATEMENTS)
    admin.goto(probes)
    submit_form(admin, "probe-card", {"recipe": "zou-repe", "model": "smol", "size": "3"})
    card = _queued(admin, store)
    assert card[0] == "probe_card"
    assert (card[1]["recipe"], card[1]["model"], card[1]["size"]) == ("zou-repe", "smol", 3)
    admin.goto(probes)
    # The card of a probe already fitted, instead of a recipe.
    submit_form(admin, "probe-card", {"recipe": "", "probe": FROZEN, "model": "smol"})
    fitted = _queued(admin, store)
    assert (fitted[0], fitted[1]["probe"], fitted[1]["recipe"]) == ("probe_card", FROZEN, "")
    assert len({kind for kind, _ in (fit, fit_lie, build, apply, card)}) == 5


# A bad value per job form, as a user (or a page edited in the browser's tools) sends it: the
# form comes back with a 422 and the reason beside the field; nothing is queued.
BAD_JOB_FORMS = [
    ("judge", "template", {"template": "Which is better? No placeholders here."}, None),
    ("probe-fit", "outer", {"outer": "1"}, "outer"),
    ("probe-fit-lie", "layers", {"name": "lie-2", "layers": "1,two"}, None),
    ("probe-datasets", "builder", {"builder": "bogus"}, "builder"),
    ("probe-apply", "probe", {"probe": f.JUDGE, "benchmark": f.STATEMENTS}, "probe"),
    ("probe-card", "size", {"size": "0"}, "size"),
    ("probe-card", "recipe", {"recipe": "", "probe": ""}, None),
]


@pytest.mark.parametrize(("form_id", "field", "values", "loosen"), BAD_JOB_FORMS)
def test_a_job_form_refuses_a_bad_value_beside_its_field(
    browser: Any,
    served: tuple[str, Store],
    form_id: str,
    field: str,
    values: dict[str, str],
    loosen: str | None,
) -> None:
    url, store = served
    context = signed_in_context(browser, url, store.settings, role="admin")
    admin = context.new_page()
    admin.set_default_timeout(15_000)
    problems: list[str] = []
    admin.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    admin.on("pageerror", lambda e: problems.append(str(e)))
    page = f"{url}/benchmarks/{f.PAIRWISE}/judge" if form_id == "judge" else f"{url}/probes"
    admin.goto(page)
    form = form_locator(admin, form_id)
    if loosen is not None:
        # What the browser itself would stop (a minimum, a closed list) is opened up, as a
        # hand-edited page or a script would: the server must refuse it all the same.
        form.locator(f'[name="{loosen}"]').evaluate(
            """(el, value) => {
                el.removeAttribute("min");
                if (el.tagName === "SELECT" && ![...el.options].some(o => o.value === value)) {
                    el.add(new Option(value, value));
                }
            }""",
            values[loosen],
        )
    before = _latest_job(store).id if _jobs(store) else 0
    submit_form(admin, form_id, values, refused=422)
    error = admin.locator(f"#error-{form_id}-{field}")
    expect(error).to_be_visible()
    assert error.inner_text().strip()
    expect(form_locator(admin, form_id).locator(".form-refusal")).to_contain_text(field)
    assert (_latest_job(store).id if _jobs(store) else 0) == before
    context.close()
    # The refused page itself is the one resource that failed to load; no script error.
    assert [p for p in problems if "status of 422" not in p] == []


def _jobs(store: Store) -> int:
    with transaction(store.factory) as s:
        return len(job_queue.list_jobs(s))


# --- review queues -----------------------------------------------------------------------------


def test_queue_forms(admin: Any, served: tuple[str, Store]) -> None:
    url, store = served
    admin.goto(f"{url}/queues")
    admin.click("#new-queue")
    submit_form(admin, "queue-benchmark", {"benchmark": f.PAIRWISE})
    submit_form(
        admin,
        "queue-new",
        {"name": "form check", "source": "filter", "query": "", "label": "reference",
         "overlap_k": "1", "blind": True},
    )  # fmt: skip
    expect(admin).to_have_url(re.compile(r"/queues/\d+$"))
    queue_id = int(admin.url.rsplit("/", 1)[1])
    submit_form(admin, "queue-assignees", {"assignees": ADMIN})
    with transaction(store.factory) as s:
        queue = s.get(ReviewQueue, queue_id)
        assert queue is not None and queue.blind and queue.name == "form check"

    admin.goto(f"{url}/queues/{queue_id}/next")
    first = admin.locator("h1.id").inner_text()
    submit_form(admin, "queue-note", {"body": "a note from the queue"})
    expect(admin.locator("#comments")).to_contain_text("a note from the queue")
    submit_form(admin, "queue-vote", button="button.choice")
    expect(admin.locator("h1.id")).not_to_have_text(first)
    submit_form(admin, "queue-undo")
    expect(admin.locator("#undone")).to_be_visible()
    expect(admin.locator("h1.id")).to_have_text(first)
    # The vote and skip keys of the review screen submit the same forms.
    submit_form(admin, "queue-vote", trigger=lambda: admin.locator("body").press("1"))
    expect(admin.locator("h1.id")).not_to_have_text(first)
    second = admin.locator("h1.id").inner_text()
    submit_form(admin, "queue-skip", trigger=lambda: admin.locator("body").press("s"))
    expect(admin.locator("h1.id")).not_to_have_text(second)
    # Blind: a reviewer reveals the item (logged) before adjudicating it.
    submit_form(admin, "queue-reveal")
    submit_form(
        admin,
        "queue-adjudicate",
        {"reason": "the key is wrong", "tags": ["wrong reference"]},
        button="button.adjudicate",
    )
    expect(admin.locator("#labels")).to_contain_text(re.compile(rf"adjudicated \S+ by {ADMIN}"))
    with transaction(store.factory) as s:
        reasons = set(s.scalars(select(LabelEvent.reason).where(LabelEvent.author == ADMIN)))
        assert "the key is wrong" in reasons


# --- a failed htmx request ---------------------------------------------------------------------


def test_a_rejected_filter_shows_its_error_in_view_beside_the_marked_form(
    browser: Any, served: tuple[str, Store]
) -> None:
    url, store = served
    # A short window, scrolled down: the message must still be where the user looks.
    context = signed_in_context(
        browser, url, store.settings, viewport={"width": 1280, "height": 500}
    )
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{url}/benchmarks/{f.PAIRWISE}")
    form = form_locator(page, "instance-filters")
    region = page.locator("#request-error")
    expect(region).to_be_hidden()
    form.locator("input[name=score_min]").fill("2")
    form.locator("input[name=score_max]").fill("1")
    apply = form.locator("button[type=submit]")
    apply.scroll_into_view_if_needed()
    page.mouse.wheel(0, 200)
    rows_before = page.locator("#results td.id a").all_inner_texts()
    with page.expect_response(lambda r: "/benchmarks/" in r.url and r.status == 422):
        apply.click()
    expect(region).to_be_visible()
    expect(region).to_contain_text("score_min is greater than score_max")
    expect(region.locator(".request-error-title")).to_contain_text("422")
    box = region.bounding_box()
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 500, box
    # The form that failed is marked and points at the message; the table is left as it was.
    expect(form).to_have_class(re.compile(r"\brequest-failed\b"))
    expect(form).to_have_attribute("aria-describedby", "request-error")
    assert page.locator("#results td.id a").all_inner_texts() == rows_before
    # Corrected, the same form succeeds: the message and the mark go.
    form.locator("input[name=score_max]").fill("")
    submit_form(page, "instance-filters")
    expect(region).to_be_hidden()
    expect(form).not_to_have_class(re.compile(r"\brequest-failed\b"))
    context.close()
