"""Benchmark lookup and creation, and the data-version counter that keys derived numbers."""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

from sqlalchemy import inspect, update
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.sql.lookup import ensure_named, get_one
from app.tables import Benchmark, BenchmarkKind

_LOOKED_UP = "appellate.benchmarks_by_name"


def get_benchmark(session: Session, name: str) -> Benchmark:
    """The benchmark called ``name`` (``NotFound`` if there is none); one query per session.

    A request resolves its benchmark once: the row found is kept in ``session.info`` and
    handed back while it is still that session's live row of that name. (A second SELECT
    would return the same identity-mapped object, without refreshing it, anyway.)
    """
    found: dict[str, Benchmark] = session.info.setdefault(_LOOKED_UP, {})
    bench = found.get(name)
    if bench is not None and bench in session:
        state = inspect(bench)
        # Expired (after a rollback), deleted or renamed: look it up again.
        live = not (state.expired_attributes or state.deleted or state.was_deleted)
        if live and bench.name == name:
            return bench
    bench = get_one(session, Benchmark, f"no benchmark named {name!r}", name=name)
    found[name] = bench
    return bench


class BenchmarkNotes(TypedDict, total=False):
    """What a benchmark says about itself, as keyword arguments; each note defaults to empty."""

    description: str
    source: str
    licence: str


_NO_NOTES: BenchmarkNotes = {"description": "", "source": "", "licence": ""}


RESERVED_NAMES = frozenset({"new"})
"""Benchmark names a page's own path takes: ``/benchmarks/new`` is the upload form, so a
benchmark called "new" would have no page."""


def check_benchmark_name(name: str) -> None:
    """Refuse a name a benchmark cannot have (:data:`RESERVED_NAMES`).

    Raises
    ------
    InvalidInput
        For a reserved name (field ``benchmark``).

    """
    if name in RESERVED_NAMES:
        raise InvalidInput(
            f"{name!r} is the path of the upload page (/benchmarks/{name}): choose another "
            "benchmark name",
            field="benchmark",
        )


def ensure_benchmark(
    session: Session, name: str, kind: str, **notes: Unpack[BenchmarkNotes]
) -> Benchmark:
    """The benchmark called ``name``, created with the given notes if it does not exist yet.

    Parameters
    ----------
    session
        The caller's session; the new row is flushed, never committed.
    name
        Unique benchmark name.
    kind
        One of :class:`app.tables.BenchmarkKind`; must match an existing benchmark's kind.
    **notes
        ``description``, ``source`` and ``licence``, stored only when the benchmark is created
        (an existing one keeps its own).

    Raises
    ------
    Conflict
        If a benchmark of that name exists with another kind.
    InvalidInput
        A reserved name (:func:`check_benchmark_name`).

    """
    check_benchmark_name(name)
    kind = BenchmarkKind(kind).value
    return ensure_named(
        session,
        Benchmark,
        name,
        {"kind": kind},
        _NO_NOTES | notes,
        lambda row, _: f"benchmark {name!r} holds {row.kind} instances, not {kind}",
    )


def bump_data_version(session: Session, benchmark: Benchmark, *, review: bool = False) -> int:
    """Increment ``data_version`` after labels, judgments or scores changed; return the new one.

    ``evidence_version`` is incremented too, unless the change is a review event (``review``:
    a vote, an adjudication or a withdrawal), which leaves the evidence and the original
    labels as they were.
    """
    bumps: dict[str, Any] = {"data_version": Benchmark.data_version + 1}
    if not review:
        bumps["evidence_version"] = Benchmark.evidence_version + 1
    # An UPDATE ... SET v = v + 1 stays correct when two writers bump concurrently.
    session.execute(
        update(Benchmark)
        .where(Benchmark.id == benchmark.id)
        .values(**bumps)
        .execution_options(synchronize_session=False)
    )
    session.flush()
    session.refresh(benchmark, ["data_version", "evidence_version"])
    return benchmark.data_version
