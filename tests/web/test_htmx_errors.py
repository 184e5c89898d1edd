"""Failed htmx requests are shown on the page: the error region, its script, readable answers."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from app.settings import Settings
from tests.support import factories as f
from tests.support.auth_support import api_client
from tests.web.test_pages import HX, client

__all__ = ["client"]  # the shared fixture: the seeded small benchmarks


def test_every_page_has_the_error_region_and_its_script(client: TestClient) -> None:
    for path in ("/", f"/benchmarks/{f.PAIRWISE}", "/jobs", "/queues"):
        page = client.get(path).text
        assert re.search(
            r'<div id="request-error" class="request-error" role="alert" hidden>', page
        )
        assert 'class="request-error-close"' in page and '<script src="/static/app.js"' in page
        config = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", page)
        assert config is not None
        # Error answers are never swapped into the page: the error region shows them.
        assert '{"code": "[45]..", "swap": false, "error": true}' in config.group(1)
        assert '"404"' not in config.group(1) and '"422"' not in config.group(1)
    script = client.get("/static/app.js").text
    for event in ("htmx:responseError", "htmx:sendError", "htmx:validation:halted"):
        assert f'"{event}"' in script
    css = client.get("/static/app.css").text
    assert ".request-error[hidden] { display: none; }" in css


def test_error_answers_to_htmx_carry_a_title_and_the_message(client: TestClient) -> None:
    bad = client.get(f"/benchmarks/{f.PAIRWISE}?flip=sideways", headers=HX)
    assert bad.status_code == 422
    assert re.search(r'<section id="results" class="error-box" role="alert">\s*<h1>422 ', bad.text)
    assert re.search(r"<li>[^<]*flip[^<]*</li>", bad.text)
    gone = client.get("/benchmarks/nope", headers=HX)
    assert gone.status_code == 404 and "<li>no benchmark named &#39;nope&#39;</li>" in gone.text


def test_an_unexpected_failure_is_a_readable_500(settings: Settings, client: TestClient) -> None:
    with api_client(settings, raise_server_exceptions=False) as failing:
        # Break rendering of the benchmark list: any exception a route raises ends here.
        failing.app.state.templates.env.globals["benchmark_url"] = None
        page = failing.get("/", headers=HX)
        api = failing.get("/api/benchmarks/nope/disagreements", params={"detector": "x"})
    assert page.status_code == 500
    assert 'class="error-box"' in page.text and "its log has the details" in page.text
    assert api.status_code == 404  # domain errors keep their own answers
