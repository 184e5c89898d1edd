"""Submitting the app's forms in browser tests, and the record of which forms were submitted.

Every ``<form>`` in ``templates/`` carries ``data-form="ID"``. :func:`submit_form` fills one
through the page (typing, choosing, ticking), submits it the way a user does (a click on its
submit button, or a key the page maps to it), waits for everything the submission asked the
server (the form's request, the redirect's target, an htmx swap or a download) and fails on
any 4xx/5xx answer among them. Only then is ``ID`` recorded in :data:`SUBMITTED`, which
``tests/web/test_forms_inventory.py`` checks against the templates: a form no browser test
submitted, or whose submission failed, leaves the inventory test red.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urljoin, urlsplit

from playwright.sync_api import Download, Error, Locator, Page, Response, expect

# form id -> the tests (pytest node ids) that submitted it successfully, in this process.
SUBMITTED: dict[str, list[str]] = {}
# The browser tests that ran in this process, as (module path under the repository, function
# name): filled by tests/browser/conftest.py. Under pytest-xdist the browser tests are spread
# over the workers: the forms inventory checks the ones its own process ran.
RAN: set[tuple[str, str]] = set()

# What the browser asked the server for on behalf of the page: not images, styles or scripts.
_ASKED = frozenset({"document", "xhr", "fetch"})

FieldValue = str | bool | Sequence[str]


def form_locator(page: Page | Locator, form_id: str) -> Locator:
    """The form ``form_id`` (its ``data-form``) inside ``page`` (a page or a part of one)."""
    return page.locator(f'form[data-form="{form_id}"]')


def fill_form(form: Locator, fields: Mapping[str, FieldValue]) -> None:
    """Set ``fields`` (control name -> value) as a user would.

    A string is typed into an input or text area, or chosen in a select (by value or label);
    a bool ticks or clears a lone checkbox; a sequence chooses options of a multiple select or
    ticks the checkboxes of that name with those values.
    """
    for name, value in fields.items():
        control = form.locator(f'[name="{name}"]')
        expect(control.first).to_be_attached()
        is_select = form.locator(f'select[name="{name}"]').count() > 0
        if isinstance(value, bool):
            control.set_checked(value)
        elif isinstance(value, str):
            if is_select:
                control.select_option(value)
            else:
                control.fill(value)
        elif is_select:
            control.select_option(list(value))
        else:
            for v in value:
                form.locator(f'input[name="{name}"][value="{v}"]').check()


def _target(form: Locator, button: Locator, page_url: str) -> tuple[str, str]:
    """(method, path) of the request the submission makes: htmx's, the button's or the form's."""
    for attr, method in (("hx-post", "POST"), ("hx-get", "GET")):
        url = form.get_attribute(attr)
        if url is not None:
            return method, urlsplit(urljoin(page_url, url)).path
    action = button.get_attribute("formaction") or form.get_attribute("action") or page_url
    method = (form.get_attribute("method") or "get").upper()
    return method, urlsplit(urljoin(page_url, action)).path


def _reason(response: Response) -> str:
    """The error list of an error page (or the start of its text), for the failure message."""
    try:
        text = response.text()
    except Error:  # the body of a redirect or an aborted answer is gone
        return "(no body)"
    items = re.findall(r"<li>(.*?)</li>", text, re.S)
    return "; ".join(items) if items else text[:300]


def submit_form(
    page: Page,
    form_id: str,
    fields: Mapping[str, FieldValue] | None = None,
    *,
    scope: Page | Locator | None = None,
    button: str | None = None,
    trigger: Callable[[], None] | None = None,
    download: bool = False,
    refused: int | None = None,
) -> Response | Download:
    """Fill and submit form ``form_id`` through the UI; fail on any 4xx/5xx answer.

    With ``refused``, the form's own answer must be that status instead (a form the server
    refuses, e.g. 422 for a bad value); such a submission is not recorded as a success.

    Parameters
    ----------
    page
        The page showing the form.
    form_id
        The form's ``data-form`` identifier.
    fields
        Control name -> value, set with :func:`fill_form` before submitting.
    scope
        Where to look for the form (e.g. one table row of a per-row form); default the page.
    button
        A selector, inside the form, of the submit button to click (default: its first).
    trigger
        Submits some other way a user can (e.g. a key the page maps to the form), instead of
        a click.
    download
        The submission downloads a file instead of showing a page.
    refused
        The status the form's own answer must have (none: it must succeed).

    Returns
    -------
    Response | Download
        The form's own answer (the final page of a redirect, the htmx answer), or the download.

    """
    form = form_locator(scope or page, form_id).first
    expect(form).to_be_visible()
    if fields:
        fill_form(form, fields)
    submit = form.locator(button or "[type=submit]").first
    method, path = _target(form, submit, page.url)
    answers: list[Response] = []

    def asked(response: Response) -> None:
        if response.request.resource_type in _ASKED:
            answers.append(response)

    def mine(response: Response) -> bool:
        return response.request.method == method and urlsplit(response.url).path == path

    go = trigger or submit.click
    htmx = form.get_attribute("hx-get") is not None or form.get_attribute("hx-post") is not None
    page.on("response", asked)
    try:
        result: Response | Download
        if download:
            with page.expect_download() as info:
                go()
            result = info.value
            assert result.failure() is None, f"{form_id}: download failed: {result.failure()}"
        elif htmx:
            with page.expect_response(mine) as answer:
                go()
            result = answer.value
            result.finished()
            # htmx marks what waits for an answer with .htmx-request until it is swapped.
            expect(page.locator(".htmx-request")).to_have_count(0)
        else:
            with page.expect_navigation(wait_until="load") as nav:
                go()
            navigated = nav.value
            assert navigated is not None, f"{form_id}: no answer"
            result = navigated
    finally:
        page.remove_listener("response", asked)
    assert any(mine(r) for r in answers), f"{form_id}: no {method} {path} was sent"
    expected = [r for r in answers if refused is not None and mine(r) and r.status == refused]
    failed = [
        f"{r.status} {r.request.method} {r.url}: {_reason(r)}"
        for r in answers
        if r.status >= 400 and r not in expected
    ]
    assert not failed, f"form {form_id} was answered with an error: {failed}"
    if refused is not None:
        assert expected, f"form {form_id} was not refused with {refused}"
        return result
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    SUBMITTED.setdefault(form_id, []).append(test)
    return result


def submitted_ids() -> set[str]:
    """The forms submitted successfully so far in this process."""
    return set(SUBMITTED)
