"""Review's decisions on a choice benchmark's labels, in the MMLU-Redux errata schema.

One CSV per subject (``import mmlu-redux`` reads it back) and the upstream report beside it.
"""

from __future__ import annotations

import os
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.export import csv_safe
from app.ingest.export.error_types import ERROR_TYPES, WRONG_GROUNDTRUTH, error_type_of
from app.ingest.export.upstream_report import upstream_report
from app.services.evidence.answer_matrix import ANSWER_LABEL, LETTERS
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.resolution import Resolution, check_k, resolved_labels
from app.services.review.queues import get_queue, item_ids, resolutions
from app.sql.bulk import one_of
from app.tables import Benchmark, BenchmarkKind, Instance, ReviewQueue

__all__ = [
    "ERRATA_COLUMNS",
    "REPORT_NAME",
    "Errata",
    "ErrataSummary",
    "Erratum",
    "collect_errata",
    "errata_row",
    "export_errata",
    "subject_file",
]

ERRATA_COLUMNS: tuple[str, ...] = (
    "question",
    "choices",
    "answer",
    "error_type",
    "source",
    "correct_answer",
    "potential_reason",
)
"""The published MMLU-Redux dataset's columns, in its order."""
REPORT_NAME = "upstream-report.md"
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_CHUNK = 5000


@dataclass(frozen=True)
class Erratum:
    """One decided item: its text, labels, decision and MMLU-Redux error type."""

    instance_id: int
    external_id: str
    group_key: str
    subject: str
    question: str
    options: tuple[str, ...]
    resolution: Resolution
    error_type: str

    @property
    def original(self) -> str | None:
        """The label before review (an option letter, or None)."""
        return self.resolution.original

    @property
    def resolved(self) -> str | None:
        """The value review decided: a letter, an outcome, or None (no label)."""
        return self.resolution.resolved

    @property
    def correct_answer(self) -> str:
        """The option letter review found correct where it differs from the original, else ''."""
        value = self.resolved
        if self.error_type == WRONG_GROUNDTRUTH and value is not None and value in LETTERS:
            return value
        return ""

    @property
    def reason(self) -> str:
        """The deciding events' distinct reasons, in order, joined by `` | ``."""
        return " | ".join(dict.fromkeys(e.reason for e in self.resolution.deciding if e.reason))


@dataclass
class Errata:
    """The decided items of one export, and what was left out."""

    benchmark: Benchmark
    scope: str
    k: int
    items: list[Erratum]
    # Reviewed items without a decision yet (votes short of k, or none).
    undecided: int = 0
    # Items adjudicated to no label with no tag naming a type (external ids).
    untyped: list[str] = field(default_factory=list)


def _decided(
    session: Session, bench: Benchmark, queue: ReviewQueue | None, k: int
) -> tuple[str, int, dict[int, Resolution], int]:
    """(scope, k, decided resolutions by instance id, undecided count) of a queue or all."""
    if queue is None:
        found = resolved_labels(session, bench.id, ANSWER_LABEL, k=k)
        decided = {iid: r for iid, r in found.items() if r.rule != "original"}
        return "every review decision", k, decided, 0
    if queue.benchmark_id != bench.id:
        raise InvalidInput(f"queue {queue.id} is not a queue of {bench.name!r}", field="queue")
    if queue.label_name != ANSWER_LABEL:
        raise InvalidInput(
            f"queue {queue.id} reviews label set {queue.label_name!r}; errata are about "
            f"{ANSWER_LABEL!r}",
            field="queue",
        )
    members = item_ids(session, queue)
    found = resolutions(session, queue, members)
    decided = {iid: r for iid, r in found.items() if r.rule != "original"}
    scope = f"review queue {queue.id} ({queue.name!r}, k = {queue.overlap_k})"
    return scope, queue.overlap_k, decided, len(members) - len(decided)


def collect_errata(
    session: Session, benchmark: str | Benchmark, *, queue: int | None = None, k: int = 2
) -> Errata:
    """The items a review decided on ``reference``: those of ``queue``, or all of them.

    A queue's items resolve with its own ``k`` (its overlap); without a queue every item
    whose ``reference`` was adjudicated or reached ``k`` unanimous votes counts. Items come
    in the benchmark's id order.

    Raises
    ------
    NotFound
        No such benchmark or queue.
    InvalidInput
        Not a choice benchmark, a queue of another benchmark or label set, ``k`` below 1, or a
        reason naming an unknown error type.

    """
    check_k(k)
    bench = get_benchmark(session, benchmark) if isinstance(benchmark, str) else benchmark
    if bench.kind != BenchmarkKind.choice:
        raise InvalidInput(
            f"benchmark {bench.name!r} holds {bench.kind} items; errata in the MMLU-Redux "
            "schema are for choice benchmarks",
            field="benchmark",
        )
    chosen = get_queue(session, queue) if queue is not None else None
    scope, k, decided, undecided = _decided(session, bench, chosen, k)
    rows = []
    ids = sorted(decided)
    for start in range(0, len(ids), _CHUNK):
        q = select(
            Instance.id,
            Instance.external_id,
            Instance.group_key,
            Instance.payload,
            Instance.sort_key,
        ).where(one_of(session, Instance.id, ids[start : start + _CHUNK]))
        rows += session.execute(q).all()
    rows.sort(key=lambda r: (r[4], r[1]))
    errata = Errata(bench, scope, k, [], undecided)
    for iid, ext, group, payload, _ in rows:
        res = decided[iid]
        try:
            kind = error_type_of(res.original, res)
        except InvalidInput as exc:
            raise InvalidInput(f"item {ext!r}: {exc.reason}", field=exc.field) from None
        if kind is None:
            errata.untyped.append(ext)
            continue
        errata.items.append(
            Erratum(
                instance_id=iid,
                external_id=ext,
                group_key=group,
                subject=str(payload.get("subject") or bench.name),
                question=str(payload.get("question") or ""),
                options=tuple(str(o) for o in payload.get("options") or ()),
                resolution=res,
                error_type=kind,
            )
        )
    return errata


@dataclass
class ErrataSummary:
    """What an errata export wrote."""

    benchmark: str
    scope: str
    items: int
    by_type: dict[str, int]
    undecided: int
    untyped: list[str]
    files: list[str]

    def line(self) -> str:
        """A one-line human summary for the CLI."""
        types = ", ".join(f"{n} {kind}" for kind, n in self.by_type.items()) or "none"
        parts = [f"{self.benchmark}: {self.items} erratum row(s) from {self.scope} ({types})"]
        if self.undecided:
            parts.append(f"{self.undecided} item(s) not decided yet")
        if self.untyped:
            parts.append(
                f"{len(self.untyped)} adjudicated to no label without a type, left out (tag "
                "them, or write error_type: TYPE in the reason)"
            )
        parts.append(f"wrote {len(self.files)} file(s) to {Path(self.files[0]).parent}")
        return "; ".join(parts)

    def __str__(self) -> str:
        return self.line()


def subject_file(subject: str) -> str:
    """The CSV name of a subject (the MMLU-Redux importer reads the subject from the stem)."""
    return f"{_UNSAFE_NAME.sub('_', subject).strip('._') or 'errata'}.csv"


def errata_row(benchmark: str, item: Erratum) -> list[str | int]:
    """One CSV row in :data:`ERRATA_COLUMNS` order.

    ``choices`` is the options' Python list literal (as MMLU-Redux writes it), ``answer`` the
    original label's 0-based index (empty when unlabelled), ``source`` where the decision was
    made (``appellate:<benchmark>/<external id>``), ``correct_answer`` the letter review found
    correct (``wrong_groundtruth`` only), ``potential_reason`` the deciding reasons.
    """
    original = item.original
    answer: str | int = LETTERS.index(original) if original and original in LETTERS else ""
    return [
        item.question,
        repr(list(item.options)),
        answer,
        item.error_type,
        f"appellate:{benchmark}/{item.external_id}",
        item.correct_answer,
        item.reason,
    ]


@contextmanager
def _replacing(path: Path) -> Iterator[IO[str]]:
    """Write ``path`` through a temporary file in its folder, renamed at the end."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            yield fh
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def export_errata(
    session: Session,
    benchmark: str,
    out_dir: str | os.PathLike[str],
    *,
    queue: int | None = None,
    k: int = 2,
    resamples: int = 2000,
    seed: int = 0,
) -> ErrataSummary:
    """Write the decided items' errata, one CSV per subject, and the upstream report.

    Files in ``out_dir`` (created if missing; files of the same names are replaced):
    ``<subject>.csv`` with :data:`ERRATA_COLUMNS` (see :func:`errata_row`; the subject is the
    payload's ``subject``, else the benchmark's name) and :data:`REPORT_NAME`
    (:func:`app.ingest.export.upstream_report.upstream_report`). Cells are written as by every
    CSV export (:mod:`app.ingest.export.csv_safe`).

    Parameters
    ----------
    session
        A session; nothing is written to the store.
    benchmark
        A choice benchmark.
    out_dir
        The folder to write into; its parent must exist.
    queue
        A review queue on ``reference`` (default: every item decided in review).
    k
        Agreeing voters that decide an item without an adjudication (a queue uses its own).
    resamples, seed
        Group-bootstrap resamples and seed of the report's accuracy intervals.

    Raises
    ------
    NotFound, InvalidInput
        As :func:`collect_errata`; a missing parent folder.

    """
    out = Path(out_dir)
    if not out.parent.is_dir():
        raise InvalidInput("no such directory", file=str(out.parent))
    errata = collect_errata(session, benchmark, queue=queue, k=k)
    report = upstream_report(session, errata, resamples=resamples, seed=seed)
    out.mkdir(exist_ok=True)
    by_file: dict[str, list[Erratum]] = {}
    for item in errata.items:
        by_file.setdefault(subject_file(item.subject), []).append(item)
    files = []
    for name, items in sorted(by_file.items()):
        path = out / name
        with _replacing(path) as fh:
            writer = csv_safe.writer(fh)
            writer.writerow(ERRATA_COLUMNS)
            writer.writerows(errata_row(errata.benchmark.name, item) for item in items)
        files.append(str(path))
    report_path = out / REPORT_NAME
    with _replacing(report_path) as fh:
        fh.write(report)
    files.append(str(report_path))
    counts = Counter(item.error_type for item in errata.items)
    return ErrataSummary(
        benchmark=errata.benchmark.name,
        scope=errata.scope,
        items=len(errata.items),
        by_type={kind: counts[kind] for kind in ERROR_TYPES if counts[kind]},
        undecided=errata.undecided,
        untyped=errata.untyped,
        files=files,
    )
