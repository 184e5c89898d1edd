"""A synthetic pairwise benchmark seeded through the real importer, and a review queue on it.

Shared by ``scale_bench.py`` and ``soak.py``: ``n`` pairwise instances (prompt, response A and
response B of about ``text_chars`` characters each), four per group, a ``reference`` label (A or
B) and three detectors whose scores read as P(A) (full-precision floats, so nearly every score
is distinct, as with real reward models). Generation is seeded: two runs write identical files.
"""

from __future__ import annotations

import csv
import hashlib
import math
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select, text  # noqa: E402

from app.db import transaction  # noqa: E402
from app.ingest.table import import_table  # noqa: E402
from app.services.evidence.benchmarks import get_benchmark  # noqa: E402
from app.services.jobs.warm_up import queue_warm_up  # noqa: E402
from app.services.review import queues  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.store import Store  # noqa: E402
from app.tables import Instance, Job  # noqa: E402
from benchmarks.serving import fresh_store, pg_admin, pg_url  # noqa: E402

BENCHMARK = "scale-pairwise"
DETECTORS = ("det-1", "det-2", "det-3")
LABEL = "reference"
GROUP_SIZE = 4
QUEUE = "soak"
WORDS = (
    "the", "of", "and", "model", "answer", "because", "therefore", "equation", "court",
    "evidence", "value", "result", "a", "an", "is", "was", "it", "that", "this", "for", "with",
    "on", "as", "by", "at", "from", "which",
)  # fmt: skip


def random_text(rng: random.Random, n_chars: int) -> str:
    """About ``n_chars`` characters of words drawn by ``rng``."""
    words: list[str] = []
    size = 0
    while size < n_chars:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


def text_pool(rng: random.Random, text_chars: int, size: int = 200) -> list[str]:
    """``size`` texts of 0.3-1.7 x ``text_chars`` characters: rows differ cheaply."""
    return [random_text(rng, int(text_chars * rng.uniform(0.3, 1.7))) for _ in range(size)]


def external_id(k: int) -> str:
    """The external id of row ``k``."""
    return f"pair-{k:07d}"


def write_pairwise_csv(path: Path, n: int, *, text_chars: int = 1500, seed: int = 0) -> int:
    """Write ``n`` pairwise rows (groups of :data:`GROUP_SIZE`); returns the file size in bytes.

    Each detector's score is a logistic of the label's sign times its own strength plus noise,
    so the three differ in quality and a few percent of items are confidently contradicted
    (the threshold mode's default cut of 0.8 lists them).
    """
    rng = random.Random(seed)
    pool = text_pool(rng, text_chars)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "group", "prompt", "response_a", "response_b", LABEL, *DETECTORS])
        for k in range(n):
            reference = rng.choice("AB")
            sign = 1.0 if reference == "A" else -1.0
            scores = [
                1.0 / (1.0 + math.exp(-(strength * sign + rng.gauss(0.0, 2.0))))
                for strength in (2.0, 1.5, 1.0)
            ]
            writer.writerow(
                [
                    external_id(k),
                    f"q{k // GROUP_SIZE:07d}",
                    rng.choice(pool),
                    rng.choice(pool),
                    rng.choice(pool),
                    reference,
                    *(repr(s) for s in scores),
                ]
            )
    return path.stat().st_size


def import_pairwise(settings: Settings, path: Path) -> dict[str, Any]:
    """Import ``path`` into ``settings``' store with ``import_table``; wall and CPU seconds."""
    store = Store.open(settings)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        with transaction(store.factory) as session:
            summary = import_table(
                session, path, "pairwise", id_column="id", group="group",
                labels={LABEL: LABEL}, scores={d: d for d in DETECTORS}, benchmark=BENCHMARK,
            )  # fmt: skip
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        store.close()
    return {
        "instances": summary.instances_added,
        "scores": summary.scores_added,
        "wall_s": round(wall, 2),
        "client_cpu_s": round(cpu, 2),
    }


def add_queue(settings: Settings, n_items: int, *, created_by: str = "") -> int:
    """A queue (two votes per item) on the first ``n_items`` instances; returns its id."""
    store = Store.open(settings)
    try:
        with transaction(store.factory) as session:
            bench = get_benchmark(session, BENCHMARK)
            ids = session.scalars(
                select(Instance.id)
                .where(Instance.benchmark_id == bench.id)
                .order_by(Instance.id)
                .limit(n_items)
            ).all()
            queue = queues.create_queue(
                session, bench, ids, name=QUEUE, label_name=LABEL, source="filter",
                overlap_k=2, blind=False, created_by=created_by,
            )  # fmt: skip
            return queue.id
    finally:
        store.close()


def queue_warm_up_job(settings: Settings) -> int | None:
    """Queue the benchmark's warm-up as ``appellate import`` does after an import; its job id."""
    store = Store.open(settings)
    try:
        with transaction(store.factory) as session:
            job = queue_warm_up(session, BENCHMARK)
            return None if job is None else job.id
    finally:
        store.close()


def wait_for_jobs(settings: Settings, timeout_s: float) -> float:
    """Seconds until no job is queued or running (a worker must run them); raises on timeout."""
    store = Store.open(settings)
    start = time.perf_counter()
    try:
        while True:
            with store.factory() as session:
                left = session.scalar(
                    select(func.count(Job.id)).where(Job.status.in_(("queued", "running")))
                )
            if not left:
                return round(time.perf_counter() - start, 1)
            if time.perf_counter() - start > timeout_s:
                raise TimeoutError(f"{left} job(s) still queued or running after {timeout_s} s")
            time.sleep(1.0)
    finally:
        store.close()


def template_name(n: int, text_chars: int) -> str:
    """The name of the kept PostgreSQL database seeded with ``n`` items of ``text_chars``.

    It names the newest migration and a digest of this file, so a template made by other code
    (another schema, other generated rows) is never reused.
    """
    head = max(p.name.split("_")[0] for p in (ROOT / "migrations" / "versions").glob("0*.py"))
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]
    return f"appellate_seed_{n}_{text_chars}_{head}_{digest}"


@contextmanager
def seeded_store(
    dialect: str,
    n: int,
    data_dir: Path,
    csv_path: Path,
    *,
    text_chars: int = 1500,
    keep_template: bool = False,
) -> Iterator[tuple[Settings, dict[str, Any]]]:
    """A fresh store holding the seeded benchmark, and the import's figures.

    The rows are imported with :func:`import_pairwise` from ``csv_path`` (written first unless
    it exists). With ``keep_template`` on PostgreSQL the seeded database is kept as a template
    (:func:`template_name`) and every store is a copy of it (``CREATE DATABASE ... TEMPLATE``):
    a million items are imported once, not once per benchmark run; the figures then say which
    template was used and whether this run made it.
    """
    template = None
    figures: dict[str, Any] = {}
    if keep_template and dialect == "postgresql":
        template = template_name(n, text_chars)
        with pg_admin() as conn:
            found = conn.scalar(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": template}
            )
        figures = {"template": template, "template_reused": found is not None}
        if found is None:
            figures.update(_make_template(template, n, data_dir, csv_path, text_chars))
    with fresh_store(dialect, data_dir, template=template) as settings:
        if template is None:
            _write_once(csv_path, n, text_chars)
            figures = import_pairwise(settings, csv_path)
        yield settings, figures


def _write_once(csv_path: Path, n: int, text_chars: int) -> None:
    if not csv_path.exists():
        write_pairwise_csv(csv_path, n, text_chars=text_chars)


def _make_template(
    name: str, n: int, data_dir: Path, csv_path: Path, text_chars: int
) -> dict[str, Any]:
    """Seed database ``name`` (built under another name, renamed once complete)."""
    building = f"{name}_building"
    with pg_admin() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{building}"'))
    settings = Settings(data_dir=data_dir, database_url=pg_url(building))
    Store.open(settings).close()  # migrates
    _write_once(csv_path, n, text_chars)
    figures = import_pairwise(settings, csv_path)
    with pg_admin() as conn:
        conn.execute(text(f'ALTER DATABASE "{building}" RENAME TO "{name}"'))
    return figures
