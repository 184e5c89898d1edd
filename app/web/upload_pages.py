"""New benchmark: upload a file, see its first rows, pick the importer, map a table, import.

Admins only. The file is copied in chunks to ``<data dir>/uploads/<id>/`` (a request over
``upload_max_bytes`` is refused before it is read, and a stream that grows past it is cut off);
a zip of a run folder is then extracted beside it, safely (see
:mod:`app.services.jobs.upload_files`), or refused whole with the reason;
the import runs as an ``import_upload`` job, so a refused file shows ``file:line: field:
reason`` on the job's page and changes nothing.
"""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path
from typing import Annotated, Any

from fastapi import File, Request, UploadFile
from starlette.responses import HTMLResponse, Response

from app.errors import InvalidInput, NotFound
from app.services.jobs.import_upload import (
    IMPORTERS,
    TABLE_KINDS,
    UPLOADS,
    ImportUploadParams,
    upload_path,
)
from app.services.jobs.upload_files import extract_zip, extracted_folder, import_target, is_zip
from app.store import Store
from app.web.auth import RequireAdmin
from app.web.deps import StoreDep
from app.web.job_forms import FormData, FormError, submit_job_form
from app.web.responses import redirect_after_post
from app.web.routers import page_router
from app.web.templating import render
from app.web.upload_preview import preview

router = page_router()

FORM = "benchmark-import"
# Rows of each mapping the form offers (a table maps a few columns; more come from the CLI).
MAP_ROWS = {"map": 4, "label": 2, "score": 2}
_CHUNK = 2**20
_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")


class TooLarge(InvalidInput):
    """An upload over the size limit (HTTP 413 on the page)."""


def _safe_name(name: str | None) -> str:
    """The upload's own file name, reduced to a plain name that keeps its extension."""
    base = Path(name or "upload").name
    cleaned = _UNSAFE.sub("_", base).strip(" .") or "upload"
    return cleaned[-200:]


def _store_upload(store: Store, upload: UploadFile, limit: int) -> tuple[str, str]:
    """Copy ``upload`` into a new uploads folder; its id and file name."""
    upload_id = uuid.uuid4().hex
    name = _safe_name(upload.filename)
    target = upload_path(store.settings.data_dir, upload_id, name)
    target.parent.mkdir(parents=True)
    written = 0
    try:
        with target.open("wb") as out:
            while chunk := upload.file.read(_CHUNK):
                written += len(chunk)
                if written > limit:
                    raise TooLarge(f"the file is larger than {limit:,} bytes", field="file")
                out.write(chunk)
    except BaseException:
        shutil.rmtree(target.parent, ignore_errors=True)
        raise
    if written == 0:
        shutil.rmtree(target.parent, ignore_errors=True)
        raise InvalidInput("the file is empty", field="file")
    if is_zip(name):
        # A run folder: extracted once, here, so that the preview and the job read plain files;
        # a zip that is unsafe or too large is refused whole and its upload folder removed.
        try:
            extract_zip(target, extracted_folder(target), max_bytes=limit)
        except BaseException:
            shutil.rmtree(target.parent, ignore_errors=True)
            raise
    return upload_id, name


def _uploaded(store: Store, upload: str) -> Path:
    """The file of upload ``upload`` (NotFound when there is none)."""
    folder = store.settings.data_dir / UPLOADS / upload
    try:
        upload_path(store.settings.data_dir, upload, "x")
    except InvalidInput:
        raise NotFound(f"no upload {upload!r}") from None
    files = sorted(p for p in folder.glob("*") if p.is_file()) if folder.is_dir() else []
    if not files:
        raise NotFound(f"no upload {upload!r}")
    return files[0]


def _page(
    request: Request,
    store: Store,
    path: Path | None = None,
    *,
    error: FormError | None = None,
    values: dict[str, str] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    context: dict[str, Any] = {
        "limit": store.settings.upload_max_bytes,
        "importers": IMPORTERS,
        "table_kinds": TABLE_KINDS,
        "map_rows": MAP_ROWS,
        "upload": None if path is None else path.parent.name,
        "filename": None if path is None else path.name,
        "size": None if path is None else path.stat().st_size,
        "preview": None if path is None else preview(path),
        "form_error": error,
        "values": values or {},
    }
    response = render(request, "new_benchmark.html", context)
    response.status_code = status_code
    return response


@router.get("/benchmarks/new", response_class=HTMLResponse, dependencies=[RequireAdmin])
def new_benchmark_page(request: Request, store: StoreDep) -> HTMLResponse:
    """Step one: choose a file to upload."""
    return _page(request, store)


@router.post("/benchmarks/new", dependencies=[RequireAdmin])
def upload_file(request: Request, store: StoreDep, file: Annotated[UploadFile, File()]) -> Response:
    """Keep the uploaded file and show its preview (a file over the limit is refused: 413)."""
    limit = store.settings.upload_max_bytes
    declared = int(request.headers.get("content-length") or 0)
    try:
        if declared > limit + _CHUNK:  # the form's other fields are a few hundred bytes
            raise TooLarge(f"the file is larger than {limit:,} bytes", field="file")
        upload, _name = _store_upload(store, file, limit)
    except InvalidInput as exc:
        error = FormError("benchmark-upload", exc.field, exc.reason)
        status = 413 if isinstance(exc, TooLarge) else 422
        return _page(request, store, error=error, status_code=status)
    return redirect_after_post(request, f"/benchmarks/new/{upload}")


@router.get("/benchmarks/new/{upload}", response_class=HTMLResponse, dependencies=[RequireAdmin])
def uploaded_page(request: Request, store: StoreDep, upload: str) -> HTMLResponse:
    """Step two: the file's first rows, the importer guessed, a table's mapping, the name."""
    return _page(request, store, _uploaded(store, upload))


def _pairs(form: dict[str, str], prefix: str) -> dict[str, str]:
    """``{name: column}`` of the form's ``<prefix>_name_<i>`` / ``<prefix>_column_<i>`` rows."""
    out = {}
    for i in range(MAP_ROWS[prefix]):
        name = form.get(f"{prefix}_name_{i}", "").strip()
        column = form.get(f"{prefix}_column_{i}", "").strip()
        if name and column:
            out[name] = column
        elif name or column:
            field = {"map": "mapping", "label": "labels", "score": "scores"}[prefix]
            raise InvalidInput("each row needs a name and a column", field=field)
    return out


@router.post("/benchmarks/new/{upload}", dependencies=[RequireAdmin])
def start_import(request: Request, store: StoreDep, upload: str, form: FormData) -> Response:
    """Queue the import job and go to its page; a bad choice is shown beside its field (422)."""
    path = _uploaded(store, upload)

    def data() -> dict[str, Any]:
        importer = form.get("importer", "")
        if importer in IMPORTERS:
            import_target(path, importer)  # a zip without the one file it reads: said here
        return {
            "upload": upload,
            "filename": path.name,
            "importer": form.get("importer", ""),
            "benchmark": form.get("benchmark", "").strip(),
            "table_kind": form.get("table_kind") or None,
            "id_column": form.get("id_column") or None,
            "mapping": _pairs(form, "map"),
            "labels": _pairs(form, "label"),
            "scores": _pairs(form, "score"),
        }

    return submit_job_form(
        request,
        store,
        FORM,
        ImportUploadParams,
        data,
        lambda error: _page(request, store, path, error=error, values=form),
    )
