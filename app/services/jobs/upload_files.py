"""Uploaded run folders: a zip extracted safely beside it, and the path an importer is given.

A zip is checked whole before anything is written: every entry must stay inside the folder
(no absolute names, no ``..``, no backslashes, no drive letters: zip-slip), links and
encrypted entries are refused, and the entry count and the total uncompressed size are capped
(the size by the same ``upload_max_bytes`` as the upload; the declared sizes are checked first
and the bytes really written again while extracting, since a zip's headers can lie).

Importers that read folders (arena-hard, mmlu-redux, alpaca-eval, mtbench-judgments, and any
later folder importer) are given the extracted folder; importers of one file (``table``,
``judgebench``) are given the zip's single file they can read, or refused with the reason.
"""

from __future__ import annotations

import re
import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath

from app.errors import InvalidInput

__all__ = [
    "EXTRACTED",
    "FILE_IMPORTERS",
    "MAX_ZIP_FILES",
    "extract_zip",
    "extracted_folder",
    "import_target",
    "is_zip",
    "upload_files",
]

EXTRACTED = "files"
"""The folder, beside an uploaded zip, that holds its extracted files."""

MAX_ZIP_FILES = 10_000
"""Entries one zip may hold (a run folder holds tens; a zip of a million empty files is a bomb)."""

DATA_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".json", ".parquet", ".pq")
"""Files the importers read (and the page previews)."""

FILE_IMPORTERS: dict[str, tuple[str, ...]] = {
    "table": DATA_SUFFIXES,
    "judgebench": (".jsonl",),
}
"""Importers that read one file, with the suffixes they read; every other importer takes folders."""

_CHUNK = 2**20
# macOS's archiver adds resource forks and Finder files no importer wants.
_JUNK = re.compile(r"(^|/)(__MACOSX/|\.DS_Store$|\._)")
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f]")


def is_zip(name: str) -> bool:
    """Whether an upload named ``name`` is a zip (by extension, as it was uploaded)."""
    return name.lower().endswith(".zip")


def extracted_folder(upload_file: Path) -> Path:
    """Where the files of the uploaded zip ``upload_file`` were extracted."""
    return upload_file.parent / EXTRACTED


def _refuse(reason: str) -> InvalidInput:
    return InvalidInput(f"{reason}: the zip was refused and nothing kept", field="file")


def _parts(name: str) -> tuple[str, ...]:
    """The path parts of entry ``name`` inside the folder; an escaping name is refused."""
    shown = name if len(name) <= 120 else name[:119] + "…"
    if "\\" in name or _CONTROL.search(name):
        # A backslash is a separator on Windows: "..\\x" escapes there.
        raise _refuse(f"entry {shown!r} has a backslash or control character in its name")
    if name.startswith("/") or _DRIVE.match(name):
        raise _refuse(f"entry {shown!r} has an absolute path")
    parts = tuple(p for p in PurePosixPath(name).parts if p not in ("", "."))
    if ".." in parts:
        raise _refuse(f"entry {shown!r} leads outside the folder (..)")
    if not parts:
        raise _refuse(f"entry {shown!r} has no name")
    return parts


def _members(
    archive: zipfile.ZipFile, max_bytes: int, max_files: int
) -> list[tuple[zipfile.ZipInfo, tuple[str, ...]]]:
    """The file entries to extract with their parts, after checking the whole zip."""
    members: list[tuple[zipfile.ZipInfo, tuple[str, ...]]] = []
    declared = 0
    for info in archive.infolist():
        if _JUNK.search(info.filename):
            continue
        parts = _parts(info.filename)
        if stat.S_ISLNK(info.external_attr >> 16):
            raise _refuse(f"entry {info.filename!r} is a link")
        if info.is_dir():
            continue
        if info.flag_bits & 0x1:
            raise _refuse(f"entry {info.filename!r} is encrypted")
        members.append((info, parts))
        declared += info.file_size
        if len(members) > max_files:
            raise _refuse(f"it holds more than {max_files:,} files")
        if declared > max_bytes:
            raise _refuse(f"its files come to more than {max_bytes:,} bytes uncompressed")
    if not members:
        raise _refuse("it holds no files")
    return members


def extract_zip(
    archive: Path, dest: Path, *, max_bytes: int, max_files: int = MAX_ZIP_FILES
) -> list[Path]:
    """Extract ``archive`` into the new folder ``dest``; the files written, in zip order.

    Raises
    ------
    InvalidInput
        (field ``file``) A file that is not a readable zip, an entry that escapes ``dest``,
        a link, an encrypted entry, two entries of one name, more than ``max_files`` files or
        more than ``max_bytes`` bytes uncompressed. ``dest`` is removed again.

    """
    try:
        zipped = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InvalidInput(f"not a readable zip file: {exc}", field="file") from None
    written: list[Path] = []
    dest.mkdir()
    try:
        with zipped:
            members = _members(zipped, max_bytes, max_files)
            total = 0
            root = dest.resolve()
            for info, parts in members:
                target = dest.joinpath(*parts)
                # Belt and braces over _parts: nothing lands outside dest, whatever the name.
                if not target.resolve().is_relative_to(root):
                    raise _refuse(f"entry {info.filename!r} leads outside the folder")
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    out = target.open("xb")
                except FileExistsError:
                    raise _refuse(f"it holds two entries named {info.filename!r}") from None
                except OSError as exc:
                    raise _refuse(f"entry {info.filename!r} cannot be written ({exc})") from None
                with out, zipped.open(info) as src:
                    while chunk := src.read(_CHUNK):
                        total += len(chunk)
                        if total > max_bytes:
                            raise _refuse(
                                f"its files come to more than {max_bytes:,} bytes uncompressed"
                            )
                        out.write(chunk)
                written.append(target)
    except (zipfile.BadZipFile, EOFError, OSError, RuntimeError) as exc:
        # A corrupt member (bad CRC, truncated data, unsupported compression) or a full disk.
        shutil.rmtree(dest, ignore_errors=True)
        raise InvalidInput(f"not a readable zip file: {exc}", field="file") from None
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return written


def upload_files(upload_file: Path) -> list[Path]:
    """The files an upload holds: the file itself, or a zip's extracted files (sorted)."""
    if not is_zip(upload_file.name):
        return [upload_file]
    folder = extracted_folder(upload_file)
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []


def import_target(upload_file: Path, importer: str) -> Path:
    """What ``importer`` is given for the upload ``upload_file``: a file or a folder.

    A plain upload is given as it is. A zip's extracted folder goes to folder importers; an
    importer of one file gets the zip's one file it reads.

    Raises
    ------
    InvalidInput
        (field ``importer``) A one-file importer and a zip holding none or several of its
        files; (field ``upload``) a zip whose extracted folder is gone.

    """
    if not is_zip(upload_file.name):
        return upload_file
    folder = extracted_folder(upload_file)
    if not folder.is_dir():
        raise InvalidInput("the zip's extracted files are gone: upload it again", field="upload")
    suffixes = FILE_IMPORTERS.get(importer)
    if suffixes is None:
        return folder
    found = [p for p in upload_files(upload_file) if p.suffix.lower() in suffixes]
    if len(found) == 1:
        return found[0]
    kinds = ", ".join(suffixes)
    if not found:
        raise InvalidInput(f"the zip holds no {kinds} file for {importer}", field="importer")
    names = ", ".join(p.relative_to(folder).as_posix() for p in found[:5])
    more = ", ..." if len(found) > 5 else ""
    raise InvalidInput(
        f"{importer} reads one file and the zip holds {len(found)} ({names}{more}): "
        "upload the one to import",
        field="importer",
    )
