"""New benchmark from the browser (issue 22 item 8): upload, preview, map, import as a job.

An admin uploads a real statements CSV, maps two of its columns, watches the job finish and
opens the benchmark; a file with a bad row fails its job with ``file:line: field: reason`` and
the store keeps no benchmark of it; reviewers and annotators get 403.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from sqlalchemy import func, select

from app.settings import Settings
from app.store import Store
from app.tables import Benchmark, Instance, Job, TokenKind
from tests.browser.test_pages import browser
from tests.conftest import DATA
from tests.support.auth_support import signed_in_context, token_for
from tests.support.form_support import submit_form
from tests.support.job_support import run_queue
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]

STATEMENTS = DATA / "truth" / "animal_class.csv"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Store]]:
    tmp = tmp_path_factory.mktemp("browser-upload")
    settings = Settings(data_dir=tmp, database_url=f"sqlite:///{tmp / 'upload.sqlite3'}")
    store = Store.open(settings)
    with live_server(settings) as url:
        yield url, store
    store.close()


@pytest.fixture
def admin(browser: Any, served: tuple[str, Store]) -> Iterator[Any]:
    url, store = served
    context = signed_in_context(browser, url, store.settings, role="admin")
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    # A refused submission is logged by the browser as a failed load: that one only.
    assert [p for p in problems if "status of 422" not in p] == []


def _worker(store: Store) -> threading.Thread:
    """Run the queue once the page has queued the import (a worker beside the server)."""
    thread = threading.Thread(target=run_queue, args=(store,), daemon=True)
    thread.start()
    return thread


def _upload(page: Any, url: str, path: Path) -> None:
    page.goto(f"{url}/")
    page.locator("a.new-benchmark").click()
    page.locator("form[data-form=benchmark-upload] input[type=file]").set_input_files(str(path))
    submit_form(page, "benchmark-upload")
    expect(page.locator("table.preview")).to_be_visible()


def _benchmarks(store: Store) -> list[str]:
    with store.factory() as s:
        return list(s.scalars(select(Benchmark.name)))


def test_upload_a_table_map_two_columns_and_open_the_benchmark(
    admin: Any, served: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = served
    header = STATEMENTS.read_text(encoding="utf-8").splitlines()[0].split(",")
    assert {"statement", "label"} <= set(header)
    _upload(admin, url, STATEMENTS)
    expect(admin.locator("table.preview thead")).to_contain_text("statement")
    values = {
        "importer": "table", "benchmark": "animals", "table_kind": "statement",
        "map_name_0": "statement", "map_column_0": "statement",
        "label_name_0": "truth", "label_column_0": "label",
    }  # fmt: skip
    submit_form(admin, "benchmark-import", values)
    expect(admin).to_have_url(re.compile(r"/jobs/\d+$"))
    expect(admin.locator("#job")).to_contain_text("Import animal_class.csv into animals")
    _worker(store).join(timeout=120)
    admin.reload()
    expect(admin.locator("#job")).to_contain_text("done")
    admin.get_by_role("link", name="animals: the instance table").click()
    expect(admin.locator("h1")).to_contain_text("animals")
    rows = len(STATEMENTS.read_text(encoding="utf-8").strip().splitlines()) - 1
    with store.factory() as s:
        n = s.scalar(select(func.count()).select_from(Instance))
    assert n == rows
    expect(admin.locator("#results")).to_contain_text("truth")


def test_a_broken_file_fails_its_job_with_the_line_and_changes_nothing(
    admin: Any, served: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = served
    bad = tmp_path / "broken.csv"
    bad.write_text("statement,label\nWater is wet.,1\nFire is cold.,maybe\n", encoding="utf-8")
    before = _benchmarks(store)
    _upload(admin, url, bad)
    values = {
        "importer": "table", "benchmark": "broken", "table_kind": "statement",
        "map_name_0": "statement", "map_column_0": "statement",
        "label_name_0": "truth", "label_column_0": "label",
    }  # fmt: skip
    submit_form(admin, "benchmark-import", values)
    _worker(store).join(timeout=120)
    admin.reload()
    job = admin.locator("#job")
    expect(job).to_contain_text("failed")
    expect(job).to_contain_text("broken.csv:3: label")
    assert _benchmarks(store) == before


def test_a_bad_choice_is_refused_beside_its_field_and_queues_nothing(
    admin: Any, served: tuple[str, Store]
) -> None:
    """The import form is a job form: a table without a mapped column is a 422 beside it."""
    url, store = served
    _upload(admin, url, STATEMENTS)
    with store.factory() as s:
        jobs = s.scalar(select(func.count()).select_from(Job))
    values = {"importer": "table", "benchmark": "unmapped", "table_kind": "statement"}
    submit_form(admin, "benchmark-import", values, refused=422)
    expect(admin.locator("#error-benchmark-import-mapping")).to_contain_text("map at least one")
    with store.factory() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == jobs


@pytest.mark.parametrize("role", ["reviewer", "annotator"])
def test_only_admins_reach_the_page(served: tuple[str, Store], role: str) -> None:
    url, store = served
    secret = token_for(store.settings, f"upload-{role}", role, TokenKind.api)
    for method, path in (("GET", "/benchmarks/new"), ("POST", "/benchmarks/new")):
        got = httpx.request(method, url + path, headers={"Authorization": f"Bearer {secret}"})
        assert got.status_code == 403, (method, path, got.status_code)
