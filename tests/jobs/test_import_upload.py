"""The ``import_upload`` job and uploaded zips (issue 22 item 8), on both databases.

A zip is extracted safely or refused whole; a zip of a run folder goes to a folder importer,
a table importer gets the zip's one table; the job's progress is bytes read and shows on the
job page while the import's transaction is still open; importing into an existing benchmark
adds only what is new and a conflicting file is refused with its reason, the store unchanged.
"""

from __future__ import annotations

import csv
import stat
import threading
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput
from app.services.jobs import queue as job_queue
from app.services.jobs.import_upload import upload_path
from app.services.jobs.live_progress import read_live_progress
from app.services.jobs.upload_files import extract_zip, extracted_folder, import_target
from app.settings import Settings
from app.store import Store
from tests.ingest.test_helpers import FORMATS, read_jsonl, table_counts
from tests.support.auth_support import api_client
from tests.support.job_support import run_queue, store_on
from workers import runner

ARENA = FORMATS / "arena_hard"


def _zip(path: Path, entries: dict[str, bytes] | list[tuple[Any, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        items = entries.items() if isinstance(entries, dict) else entries
        for name, data in items:
            zf.writestr(name, data)
    return path


def _link(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.mark.parametrize(
    ("entries", "reason"),
    [
        (
            {"ok.csv": b"a\n1\n", "../evil.csv": b"x"},
            "entry '../evil.csv' leads outside the folder",
        ),
        ({"run/../../evil.csv": b"x"}, "leads outside the folder"),
        ({"/etc/evil.csv": b"x"}, "entry '/etc/evil.csv' has an absolute path"),
        ({"C:/evil.csv": b"x"}, "has an absolute path"),
        ({"run\\..\\..\\evil.csv": b"x"}, "has a backslash"),
        ([(_link("run/link"), b"/etc/passwd")], "entry 'run/link' is a link"),
        ({f"f{i}.csv": b"a\n" for i in range(4)}, "it holds more than 3 files"),
        ({"big.csv": b"x" * 2000}, "more than 1,000 bytes uncompressed"),
        ({"__MACOSX/._a": b"x"}, "it holds no files"),
    ],
)
def test_an_unsafe_zip_is_refused_whole(tmp_path: Path, entries: Any, reason: str) -> None:
    archive = _zip(tmp_path / "run.zip", entries)
    dest = tmp_path / "files"
    with pytest.raises(InvalidInput) as err:
        extract_zip(archive, dest, max_bytes=1000, max_files=3)
    assert reason in err.value.reason and err.value.field == "file"
    assert err.value.reason.endswith("the zip was refused and nothing kept")
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["run.zip"]


def test_a_file_that_is_not_a_zip_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "run.zip"
    archive.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(InvalidInput, match="not a readable zip file"):
        extract_zip(archive, tmp_path / "files", max_bytes=1000)
    assert not (tmp_path / "files").exists()


def test_a_safe_zip_is_extracted_and_importers_get_a_folder_or_its_one_file(
    tmp_path: Path,
) -> None:
    archive = _zip(
        tmp_path / "run.zip",
        {"run/": b"", "run/./a/items.csv": b"s,l\nx,1\n", "run/README.md": b"hi", ".DS_Store": b""},
    )
    written = extract_zip(archive, extracted_folder(archive), max_bytes=1000)
    folder = tmp_path / "files"
    assert written == [folder / "run/a/items.csv", folder / "run/README.md"]
    assert (folder / "run/a/items.csv").read_bytes() == b"s,l\nx,1\n"
    assert import_target(archive, "arena-hard") == folder
    assert import_target(archive, "table") == folder / "run/a/items.csv"
    with pytest.raises(InvalidInput, match=r"the zip holds no \.jsonl file for judgebench"):
        import_target(archive, "judgebench")
    (folder / "run/more.csv").write_text("s,l\n")
    with pytest.raises(InvalidInput) as err:
        import_target(archive, "table")
    assert err.value.reason == (
        "table reads one file and the zip holds 2 (run/a/items.csv, run/more.csv): "
        "upload the one to import"
    )


# --- the job, on both databases ---


@pytest.fixture
def store(settings: Settings, engine: Engine) -> Store:
    return store_on(settings, engine)


def _upload(store: Store, source: Path, name: str | None = None) -> tuple[str, str]:
    """Put ``source`` where the page puts an upload (a zip extracted as the page does)."""
    upload = uuid.uuid4().hex
    name = name or source.name
    target = upload_path(store.settings.data_dir, upload, name)
    target.parent.mkdir(parents=True)
    target.write_bytes(source.read_bytes())
    if name.endswith(".zip"):
        extract_zip(target, extracted_folder(target), max_bytes=store.settings.upload_max_bytes)
    return upload, name


def _enqueue(store: Store, upload: str, name: str, importer: str, **params: Any) -> int:
    with transaction(store.write_factory) as s:
        data = {"upload": upload, "filename": name, "importer": importer} | params
        return job_queue.enqueue(s, "import_upload", data).id


def _finished(store: Store, job_id: int) -> Any:
    with transaction(store.factory) as s:
        return job_queue.get_job(s, job_id)


def _counts(factory: sessionmaker[Session]) -> dict[str, int]:
    """Rows per table, but for the jobs (each import queues one)."""
    return {k: v for k, v in table_counts(factory).items() if k != "jobs"}


def _zip_folder(folder: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, Path("arena-run") / path.relative_to(folder))
    return archive


def test_a_zipped_run_folder_imports_through_a_folder_importer_twice_without_change(
    store: Store, factory: sessionmaker[Session], tmp_path: Path
) -> None:
    archive = _zip_folder(ARENA, tmp_path / "arena-run.zip")
    upload, name = _upload(store, archive)
    first = _enqueue(store, upload, name, "arena-hard", benchmark="ah")
    run_queue(store)
    job = _finished(store, first)
    assert job.status == "done", job.error
    # One item per (question, model): counted directly over the raw files.
    items = {(r["question_id"], r["model"]) for p in ARENA.rglob("*.jsonl") for r in read_jsonl(p)}
    assert job.result["instances_added"] == len(items) > 0
    total = sum(p.stat().st_size for p in extracted_folder(upload_path(
        store.settings.data_dir, upload, name)).rglob("*") if p.is_file())  # fmt: skip
    assert (job.progress_done, job.progress_total) == (total, total)
    before = _counts(factory)
    again = _enqueue(store, upload, name, "arena-hard", benchmark="ah")
    run_queue(store)
    job = _finished(store, again)
    assert job.status == "done", job.error
    assert job.result["instances_added"] == 0 and job.result["instances_skipped"] == len(items)
    assert _counts(factory) == before


def _statements(path: Path, rows: int, flip: int | None = None) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["id", "statement", "label"])
        for i in range(rows):
            label = (i % 2) ^ (1 if i == flip else 0)
            out.writerow([f"s{i}", f"Statement number {i} is {'x' * 40}.", label])
    return path


TABLE = {
    "table_kind": "statement",
    "id_column": "id",
    "mapping": {"statement": "statement"},
    "labels": {"truth": "label"},
}


def test_adding_to_an_existing_benchmark_is_idempotent_and_a_conflict_is_refused(
    store: Store, factory: sessionmaker[Session], tmp_path: Path
) -> None:
    upload, name = _upload(store, _statements(tmp_path / "facts.csv", 20))
    first = _enqueue(store, upload, name, "table", benchmark="facts", **TABLE)
    run_queue(store)
    assert _finished(store, first).result["instances_added"] == 20
    # More rows for the same benchmark: the 20 already there are skipped, 10 added.
    upload, name = _upload(store, _statements(tmp_path / "more.csv", 30))
    more = _enqueue(store, upload, name, "table", benchmark="facts", **TABLE)
    run_queue(store)
    job = _finished(store, more)
    assert job.status == "done", job.error
    assert (job.result["instances_added"], job.result["instances_skipped"]) == (10, 20)
    before = _counts(factory)
    upload, name = _upload(store, _statements(tmp_path / "flipped.csv", 30, flip=7))
    bad = _enqueue(store, upload, name, "table", benchmark="facts", **TABLE)
    run_queue(store)
    job = _finished(store, bad)
    assert job.status == "failed"
    # Line 9: the header is line 1, s7 is the eighth record.
    assert job.error.endswith(
        "flipped.csv:9: label: label 'truth' of 's7' was imported as '1', the file says '0'"
    ), job.error
    assert _counts(factory) == before


def test_progress_is_bytes_read_and_shows_on_the_job_page_while_the_import_runs(
    store: Store,
    settings: Settings,
    factory: sessionmaker[Session],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = _statements(tmp_path / "many.csv", 4000)
    total = source.stat().st_size
    assert total > 4 * 65536  # several reads, so a report comes before the end
    upload, name = _upload(store, source)
    job_id = _enqueue(store, upload, name, "table", benchmark="many", **TABLE)

    reported = threading.Event()
    release = threading.Event()
    seen: list[tuple[int, int | None]] = []
    write = runner.write_live_progress

    def pausing(data_dir: Path, job: int, done: int, of: int | None) -> None:
        write(data_dir, job, done, of)
        seen.append((done, of))
        if 0 < done < total and not reported.is_set():
            # Hold the import here, its transaction open, while the page is read.
            reported.set()
            assert release.wait(60)

    monkeypatch.setattr(runner, "write_live_progress", pausing)
    worker = threading.Thread(target=run_queue, args=(store,), daemon=True)
    # The client's user is written first: on SQLite the import holds the write lock.
    with api_client(settings) as client:
        worker.start()
        try:
            assert reported.wait(60), "no progress was reported while reading"
            done, _ = seen[-1]
            assert read_live_progress(settings.data_dir, job_id) == (done, total)
            page = client.get(f"/jobs/{job_id}")
            assert page.status_code == 200
            assert f'<progress value="{done}" max="{total}">' in page.text
            assert _counts(factory)["instances"] == 0  # nothing committed yet
        finally:
            release.set()
            worker.join(120)
    job = _finished(store, job_id)
    assert job.status == "done", job.error
    assert (job.progress_done, job.progress_total) == (total, total)
    assert all(of == total for _, of in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert read_live_progress(settings.data_dir, job_id) is None  # cleared at the end
