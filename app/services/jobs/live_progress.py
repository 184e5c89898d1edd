"""Progress written beside the database while a job's one long transaction holds it.

An import runs in one transaction: on SQLite it holds the only write lock until it commits,
and on PostgreSQL the job's row is locked by it, so no progress could commit meanwhile. The
worker writes ``(done, total)`` to a small file in the data directory (shared by the web and
the workers, as the uploads are) and the job page shows it while the job runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from app.files import write_text_atomically

__all__ = ["FOLDER", "clear_live_progress", "read_live_progress", "write_live_progress"]

FOLDER = "job-progress"


def _path(data_dir: Path, job_id: int) -> Path:
    return data_dir / FOLDER / f"{int(job_id)}.json"


def write_live_progress(data_dir: Path, job_id: int, done: int, total: int | None) -> None:
    """Record ``done`` of ``total`` for job ``job_id`` (atomically: a reader never sees half)."""
    write_text_atomically(_path(data_dir, job_id), json.dumps({"done": int(done), "total": total}))


def read_live_progress(data_dir: Path, job_id: int) -> tuple[int, int | None] | None:
    """The last ``(done, total)`` written for job ``job_id``, or None."""
    try:
        data = json.loads(_path(data_dir, job_id).read_text(encoding="utf-8"))
        total = data["total"]
        return int(data["done"]), None if total is None else int(total)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clear_live_progress(data_dir: Path, job_id: int) -> None:
    """Forget job ``job_id``'s live progress (its transaction ended)."""
    _path(data_dir, job_id).unlink(missing_ok=True)
