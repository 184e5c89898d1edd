"""New benchmark from the browser (issue 22 item 8): upload, preview, map, import as a job.

An admin uploads a real statements CSV, maps two of its columns, watches the job finish and
opens the benchmark; a file with a bad row fails its job with ``file:line: field: reason`` and
the store keeps no benchmark of it; a zip of a real Arena-Hard run folder is listed, imported
and opened; a zip with an entry that escapes its folder is refused on the page and nothing is
kept; reviewers and annotators get 403.
"""

from __future__ import annotations

import re
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from sqlalchemy import func, select

from app.settings import Settings
from app.store import Store
from app.tables import Benchmark, Instance, Job, LabelEvent, TokenKind
from tests.browser.test_pages import browser
from tests.conftest import DATA
from tests.ingest.test_helpers import FORMATS
from tests.support.auth_support import signed_in_context, token_for
from tests.support.form_support import submit_form
from tests.support.job_support import run_queue
from tests.support.live_server import live_server

pytestmark = pytest.mark.browser

__all__ = ["browser"]

STATEMENTS = DATA / "truth" / "animal_class.csv"
ARENA = FORMATS / "arena_hard"


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


def _upload(page: Any, url: str, path: Path, *, refused: int | None = None) -> None:
    page.goto(f"{url}/")
    page.locator("a.new-benchmark").click()
    page.locator("form[data-form=benchmark-upload] input[type=file]").set_input_files(str(path))
    submit_form(page, "benchmark-upload", refused=refused)
    if refused is None:
        expect(page.locator("table.preview")).to_be_visible()


def _uploads(store: Store) -> list[str]:
    """Every file kept under the uploads folder."""
    root = store.settings.data_dir / "uploads"
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) if root.is_dir() else []


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


MAPPED = {"map_name_0": "statement", "map_column_0": "statement"}


@pytest.mark.parametrize(
    ("values", "field", "message"),
    [
        # A table without a mapped column.
        ({"benchmark": "unmapped"}, "mapping", "map at least one"),
        # A name whose page would be the upload form itself (/benchmarks/new).
        ({"benchmark": "new", **MAPPED}, "benchmark", "the path of the upload page"),
    ],
)
def test_a_bad_choice_is_refused_beside_its_field_and_queues_nothing(
    admin: Any, served: tuple[str, Store], values: dict[str, str], field: str, message: str
) -> None:
    """The import form is a job form: a bad choice is a 422 beside its field."""
    url, store = served
    _upload(admin, url, STATEMENTS)
    with store.factory() as s:
        jobs = s.scalar(select(func.count()).select_from(Job))
    values = {"importer": "table", "table_kind": "statement", **values}
    submit_form(admin, "benchmark-import", values, refused=422)
    expect(admin.locator(f"#error-benchmark-import-{field}")).to_contain_text(message)
    with store.factory() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == jobs


@pytest.mark.parametrize("role", ["reviewer", "annotator"])
def test_only_admins_reach_the_page(served: tuple[str, Store], role: str) -> None:
    url, store = served
    secret = token_for(store.settings, f"upload-{role}", role, TokenKind.api)
    for method, path in (("GET", "/benchmarks/new"), ("POST", "/benchmarks/new")):
        got = httpx.request(method, url + path, headers={"Authorization": f"Bearer {secret}"})
        assert got.status_code == 403, (method, path, got.status_code)


def test_upload_a_zipped_run_folder_and_open_the_benchmark(
    admin: Any, served: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = served
    archive = tmp_path / "arena-run.zip"
    files = sorted(p for p in ARENA.rglob("*") if p.is_file())
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in files:
            zf.write(path, Path("arena-run") / path.relative_to(ARENA))
    _upload(admin, url, archive)
    listed = admin.locator("ul.zip-files li")
    expect(listed).to_have_count(len(files))
    expect(listed.first).to_contain_text("arena-run/LICENSE")
    # The first data file is previewed, and its columns name the importer.
    expect(admin.locator("h2", has_text="First rows of")).to_contain_text(".jsonl")
    expect(admin.locator("#importer")).to_have_value("arena-hard")
    submit_form(admin, "benchmark-import", {"benchmark": "arena-zip"})
    expect(admin.locator("#job")).to_contain_text("Import arena-run.zip into arena-zip")
    _worker(store).join(timeout=120)
    admin.reload()
    expect(admin.locator("#job")).to_contain_text("done")
    total = sum(p.stat().st_size for p in files)
    # Progress was bytes read of the zip's files, all of them at the end.
    expect(admin.locator("#job progress")).to_have_attribute("value", str(total))
    expect(admin.locator("#job progress")).to_have_attribute("max", str(total))
    with store.factory() as s:
        job = s.scalars(select(Job).order_by(Job.id.desc())).first()
    assert job is not None and (job.progress_done, job.progress_total) == (total, total)
    admin.get_by_role("link", name="arena-zip: the instance table").click()
    expect(admin.locator("h1")).to_contain_text("arena-zip")
    with store.factory() as s:
        bench = s.scalar(select(Benchmark).where(Benchmark.name == "arena-zip"))
        assert bench is not None
        n = s.scalar(select(func.count()).where(Instance.benchmark_id == bench.id))
    assert n == job.result["instances_added"] > 0


def test_a_zip_escaping_its_folder_is_refused_and_nothing_is_kept(
    admin: Any, served: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = served
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("run/items.csv", "statement,label\nWater is wet.,1\n")
        zf.writestr("run/../../escaped.csv", "statement,label\nx,1\n")
    before = (_benchmarks(store), _uploads(store))
    with store.factory() as s:
        jobs = s.scalar(select(func.count()).select_from(Job))
    _upload(admin, url, archive, refused=422)
    expect(admin.locator("#error-benchmark-upload-file")).to_have_text(
        "entry 'run/../../escaped.csv' leads outside the folder (..): "
        "the zip was refused and nothing kept"
    )
    assert (_benchmarks(store), _uploads(store)) == before
    assert not (store.settings.data_dir.parent / "escaped.csv").exists()
    with store.factory() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == jobs


def test_upload_mtbench_human_judgments_as_votes_per_annotator(
    admin: Any, served: tuple[str, Store]
) -> None:
    # The page suggests the importer from the file's columns; each row is one annotator's vote.
    url, store = served
    path = FORMATS / "mt_bench_human" / "human_judgments.jsonl"
    rows = len(path.read_text(encoding="utf-8").strip().splitlines())
    _upload(admin, url, path)
    expect(admin.locator("#importer")).to_have_value("mtbench-human")
    submit_form(admin, "benchmark-import", {"benchmark": "mt-human"})
    expect(admin).to_have_url(re.compile(r"/jobs/\d+$"))
    _worker(store).join(timeout=120)
    admin.reload()
    expect(admin.locator("#job")).to_contain_text("done")
    with store.factory() as s:
        bench = s.scalar(select(Benchmark).where(Benchmark.name == "mt-human"))
        assert bench is not None
        votes = s.scalar(
            select(func.count())
            .select_from(LabelEvent)
            .join(Instance, Instance.id == LabelEvent.instance_id)
            .where(Instance.benchmark_id == bench.id, LabelEvent.label_name == "human")
        )
    assert votes == rows
