"""Resolved labels (votes, adjudication, original), the changelog and the benchmark export."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
import typer
from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli.export import parse_filter, register
from app.db import transaction
from app.errors import InvalidInput, NotFound
from app.ingest.export import benchmark as export_module
from app.ingest.export.benchmark import changelog_path, export_benchmark
from app.services.evidence.labels import append_label
from app.services.evidence.resolution import (
    CHANGE_COLUMNS,
    ChangeRow,
    Resolution,
    changelog,
    resolved_labels,
)
from app.services.table.browse import benchmark_view
from app.services.table.instance_filter import InstanceFilter, LabelCondition, SliceCondition
from app.settings import Settings
from app.tables import Base, Benchmark, Instance, LabelEvent
from tests.support.factories import FLIP, PAIRWISE, STATEMENTS, seed_benchmarks

REF = "reference"
TYPED = "typed-mini"
# Text that breaks naive CSV/JSON writers and readers.
NASTY = (
    'She said "hi", then left;\r\nnext line\n\ttab, comma, =SUM(A1) '
    "<script>alert('x')</script> &amp; café ☕ 日本語 \u2028 end"
)


def _id(session: Session, external_id: str, bench: str = PAIRWISE) -> int:
    return session.scalars(
        select(Instance.id)
        .join(Benchmark, Benchmark.id == Instance.benchmark_id)
        .where(Benchmark.name == bench, Instance.external_id == external_id)
    ).one()


def _bench_id(session: Session, name: str = PAIRWISE) -> int:
    return session.scalars(select(Benchmark.id).where(Benchmark.name == name)).one()


def _record(
    session: Session,
    external_id: str,
    value: str | None,
    *,
    source: str,
    author: str = "",
    reason: str = "",
    tags: list[str] | None = None,
    label: str = REF,
    bench: str = PAIRWISE,
) -> LabelEvent:
    """Append one review event.

    Written as a row, not through ``append_label``: that one skips an event equal to the
    latest of its own history (the author's vote, the adjudication), and these tests want
    every event as written.
    """
    ev = LabelEvent(
        instance_id=_id(session, external_id, bench),
        label_name=label,
        value=value,
        source=source,
        author=author,
        reason=reason,
        tags=tags or [],
    )
    session.add(ev)
    session.flush()
    return ev


@pytest.fixture
def seeded(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    """The small seeded benchmarks with review events on the pairwise ``reference`` labels.

    Originals (import, and a later ``reviewer`` event on pair-004): 001 A, 002 B, 003 A,
    004 B, 005 B, q?x A.
    """
    seed_benchmarks(factory)
    with transaction(factory) as s:
        # Adjudication beats unanimous votes.
        _record(s, "pair/001:a|b", "B", source="vote", author="alice", tags=["wrong-key"])
        _record(s, "pair/001:a|b", "B", source="vote", author="bob")
        _record(s, "pair/001:a|b", "A", source="adjudication", author="carol", reason="key ok")
        # Two agreeing votes beat the original.
        _record(s, "pair/002", "A", source="vote", author="alice", reason="B is wrong")
        _record(
            s, "pair/002", "A", source="vote", author="bob", reason="", tags=["ambiguous", "typo"]
        )
        # Split votes keep the original.
        _record(s, "pair-003-xss", "B", source="vote", author="alice")
        _record(s, "pair-003-xss", "A", source="vote", author="bob")
        # Alice changes her mind: her later vote replaces the earlier one, the votes split.
        _record(s, "pair-004", "A", source="vote", author="alice")
        _record(s, "pair-004", "A", source="vote", author="bob")
        _record(s, "pair-004", "B", source="vote", author="alice", reason="second look")
        # A null adjudication: the instance has no label after review.
        _record(s, "pair-005", None, source="adjudication", author="carol", reason="broken item")
        # One vote is below k=2.
        _record(s, "q?x#y%z", "B", source="vote", author="alice", tags=["wrong-key"])
        # Derived history stays the original: a re-derived flip label.
        append_label(s, _id(s, "pair/001:a|b"), FLIP, "1", source="derived")
    return factory


def _resolved(factory: sessionmaker[Session], k: int = 2) -> dict[str, Resolution]:
    with transaction(factory) as s:
        bench_id = _bench_id(s)
        got = resolved_labels(s, bench_id, REF, k=k)
        ext = {
            iid: e
            for iid, e in s.execute(
                select(Instance.id, Instance.external_id).where(Instance.id.in_(got))
            )
        }
    return {ext[iid]: res for iid, res in got.items()}


def test_resolution_rules(seeded: sessionmaker[Session]) -> None:
    res = _resolved(seeded)
    summary = {e: (r.original, r.resolved, r.rule) for e, r in res.items()}
    assert summary == {
        "pair/001:a|b": ("A", "A", "adjudication"),
        "pair/002": ("B", "A", "unanimous-votes"),
        "pair-003-xss": ("A", "A", "original"),
        "pair-004": ("B", "B", "original"),
        "pair-005": ("B", None, "adjudication"),
        "q?x#y%z": ("A", "A", "original"),
    }
    assert res["pair/001:a|b"].votes == {"alice": "B", "bob": "B"}
    assert res["pair/001:a|b"].adjudication is not None
    assert res["pair/001:a|b"].adjudication.author == "carol"
    assert res["pair-003-xss"].votes == {"alice": "B", "bob": "A"}
    assert res["pair-004"].votes == {"alice": "B", "bob": "A"}
    assert [e.author for e in res["pair/002"].deciding] == ["alice", "bob"]
    assert res["pair-003-xss"].deciding == ()
    # The original of pair-004 is its latest non-review event (source "reviewer"), not the import.
    orig = res["pair-004"].original_event
    assert orig is not None and (orig.source, orig.value) == ("reviewer", "B")
    assert {e for e, r in res.items() if r.changed} == {"pair/002", "pair-005"}


def test_k_sets_how_many_agreeing_votes_override(seeded: sessionmaker[Session]) -> None:
    res = _resolved(seeded, k=1)
    assert (res["q?x#y%z"].resolved, res["q?x#y%z"].rule) == ("B", "unanimous-votes")
    # Still split, whatever k is.
    assert res["pair-003-xss"].rule == "original"
    res = _resolved(seeded, k=3)
    assert (res["pair/002"].resolved, res["pair/002"].rule) == ("B", "original")
    with transaction(seeded) as s, pytest.raises(InvalidInput, match="k must be"):
        resolved_labels(s, _bench_id(s), REF, k=0)


def test_withdrawn_vote_and_original_retraction(seeded: sessionmaker[Session]) -> None:
    with transaction(seeded) as s:
        # A null vote withdraws the author's vote: bob alone is below k.
        _record(s, "pair/002", None, source="vote", author="alice")
        # A retracted original is no label; two agreeing votes then give one.
        _record(s, "q?x#y%z", None, source="import")
        _record(s, "q?x#y%z", "B", source="vote", author="bob")
    res = _resolved(seeded)
    assert (res["pair/002"].resolved, res["pair/002"].rule) == ("B", "original")
    assert res["pair/002"].votes == {"bob": "A"}
    assert len(res["pair/002"].vote_events) == 2
    assert (res["q?x#y%z"].original, res["q?x#y%z"].resolved) == (None, "B")


def test_derived_history_is_the_original(seeded: sessionmaker[Session]) -> None:
    with transaction(seeded) as s:
        bench_id = _bench_id(s)
        first = _id(s, "pair/001:a|b")
        flips = resolved_labels(s, bench_id, FLIP)
        # No flip label at all for q?x#y%z (never judged): absent, not a null entry.
        assert _id(s, "q?x#y%z") not in flips
        # Import, then derived: the latest non-review event is the original.
        truth = resolved_labels(s, _bench_id(s, STATEMENTS), "truth")
    assert (flips[first].original, flips[first].resolved, flips[first].rule) == (
        "1",
        "1",
        "original",
    )
    assert all(r.rule == "original" and not r.changed for r in flips.values())
    assert all(r.rule == "original" for r in truth.values())


def test_events_written_by_append_label(factory: sessionmaker[Session]) -> None:
    seed_benchmarks(factory)
    with transaction(factory) as s:
        iid = _id(s, "pair/002")
        assert append_label(s, iid, REF, "A", source="vote", author="alice") is not None
        assert append_label(s, iid, REF, "B", source="vote", author="bob") is not None
        assert append_label(s, iid, REF, "A", source="adjudication", author="carol") is not None
        res = resolved_labels(s, _bench_id(s), REF)[iid]
    assert (res.original, res.resolved, res.rule) == ("B", "A", "adjudication")
    assert res.votes == {"alice": "A", "bob": "B"}


def _count_statements(engine: Engine) -> Iterator[list[str]]:
    seen: list[str] = []

    def listen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", listen)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", listen)


def test_one_query_per_label_set(seeded: sessionmaker[Session], engine: Engine) -> None:
    with transaction(seeded) as s:
        bench_id = _bench_id(s)
        s.connection()  # begin first, so BEGIN is not counted
        for seen in _count_statements(engine):
            resolved_labels(s, bench_id, REF)
            assert len(seen) == 1
            seen.clear()
            changelog(s, bench_id, [REF, FLIP])
            assert len(seen) == 2


def test_changelog(seeded: sessionmaker[Session]) -> None:
    with transaction(seeded) as s:
        bench_id = _bench_id(s)
        rows = changelog(s, bench_id)
        times = {
            (ev.author, ev.instance_id): ev.created_at
            for ev in s.scalars(select(LabelEvent).where(LabelEvent.source == "vote"))
        }
        bob_002 = times[("bob", _id(s, "pair/002"))]
        adjudications = s.scalars(
            select(LabelEvent.created_at).where(
                LabelEvent.source == "adjudication", LabelEvent.value.is_(None)
            )
        ).all()
        assert changelog(s, bench_id, [FLIP]) == []
        # Sorted by label set, then external id (Python's string order).
        assert [r.external_id for r in changelog(s, bench_id, k=1)] == [
            "pair-005",
            "pair/002",
            "q?x#y%z",
        ]
    assert rows == [
        ChangeRow(
            external_id="pair-005",
            label=REF,
            original="B",
            resolved=None,
            rule="adjudication",
            authors=("carol",),
            reasons=("broken item",),
            tags=(),
            decided_at=rows[0].decided_at,
        ),
        ChangeRow(
            external_id="pair/002",
            label=REF,
            original="B",
            resolved="A",
            rule="unanimous-votes",
            authors=("alice", "bob"),
            reasons=("B is wrong", ""),
            tags=("ambiguous", "typo"),
            decided_at=rows[1].decided_at,
        ),
    ]
    # The time of the deciding event: the vote that completed the agreement.
    assert _same_instant(rows[1].decided_at, bob_002)
    assert _same_instant(rows[0].decided_at, adjudications[0])


def _same_instant(a: Any, b: Any) -> bool:
    def utc(t: Any) -> Any:
        return t.replace(tzinfo=UTC) if t.tzinfo is None else t

    return bool(utc(a) == utc(b))


# --- export -------------------------------------------------------------------------------


def _read(path: Path, fmt: str) -> list[dict[str, Any]]:
    """An export read back with the usual tools: json, pandas (CSV), pyarrow (Parquet)."""
    if fmt == "jsonl":
        with open(path, encoding="utf-8") as fh:
            # Split on "\n" only: U+2028 inside a value is not a line end in JSONL.
            return [json.loads(line) for line in fh.read().split("\n") if line]
    if fmt == "csv":
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
        return frame.to_dict("records")
    return pq.read_table(path).to_pylist()


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _expected(
    factory: sessionmaker[Session], bench: str, labels: str = "resolved", k: int = 2
) -> dict[str, dict[str, Any]]:
    """What the store says each row must hold, computed without the exporter."""
    with transaction(factory) as s:
        bench_id = _bench_id(s, bench)
        instances = s.execute(
            select(Instance.id, Instance.external_id, Instance.group_key, Instance.payload).where(
                Instance.benchmark_id == bench_id
            )
        ).all()
        names = sorted(
            set(
                s.scalars(
                    select(LabelEvent.label_name).where(
                        LabelEvent.instance_id.in_([i for i, *_ in instances])
                    )
                )
            )
        )
        per_label = {n: resolved_labels(s, bench_id, n, k=k) for n in names}
    out = {}
    for iid, ext, group, payload in instances:
        row: dict[str, Any] = {"external_id": ext, "group_key": group, **payload}
        for n in names:
            res = per_label[n].get(iid)
            if labels == "resolved":
                row[f"label:{n}"] = res.resolved if res else None
                row[f"original:{n}"] = res.original if res else None
            else:
                row[f"label:{n}"] = res.original if res else None
        out[ext] = row
    return out


def _add_typed_benchmark(factory: sessionmaker[Session]) -> None:
    """A benchmark whose payload fields have every JSON type, some mixed or missing."""
    payloads = [
        {"text": NASTY, "n": 1, "x": 1, "flag": True, "meta": {"a": [1, "b"]}, "mixed": "s"},
        {"text": "plain", "n": -7, "x": 2.5, "flag": False, "meta": None, "mixed": 3},
        {"text": "", "n": None, "x": 0, "meta": {"ü": "ß"}, "mixed": [1]},
    ]
    with transaction(factory) as s:
        bench = Benchmark(name=TYPED, kind="response")
        s.add(bench)
        s.flush()
        for i, payload in enumerate(payloads):
            inst = Instance(
                benchmark_id=bench.id, external_id=f"t{i}", group_key="g", payload=payload
            )
            s.add(inst)
            s.flush()
            append_label(s, inst.id, "truth", NASTY if i == 0 else str(i), source="import")


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_round_trip(seeded: sessionmaker[Session], tmp_path: Path, fmt: str) -> None:
    with transaction(seeded) as s:
        # Payload text with quotes, CR/LF, tabs, unicode, HTML and a line separator.
        inst = s.get(Instance, _id(s, "pair-005"))
        assert inst is not None
        inst.payload = {**inst.payload, "prompt": NASTY}
    out = tmp_path / f"release.{fmt}"
    with transaction(seeded) as s:
        summary = export_benchmark(s, PAIRWISE, out)
    expected = _expected(seeded, PAIRWISE)
    got = _read(out, fmt)
    assert summary.rows == len(got) == len(expected) == 6
    assert summary.label_sets == [FLIP, REF]
    assert summary.changed == 2
    assert summary.files == [str(out), str(changelog_path(out))]
    # Rows in external-id order, with a fixed column order.
    assert [r["external_id"] for r in got] == sorted(expected)
    assert list(got[0]) == [
        "external_id",
        "group_key",
        "prompt",
        "response_a",
        "response_b",
        "source",
        "response_model",
        f"label:{FLIP}",
        f"original:{FLIP}",
        f"label:{REF}",
        f"original:{REF}",
    ]
    for row in got:
        want = expected[row["external_id"]]
        if fmt == "csv":
            want = {key: _csv_cell(v) for key, v in want.items()}
        assert row == want
    by_id = {r["external_id"]: r for r in got}
    assert by_id["pair-005"]["prompt"] == NASTY
    assert (by_id["pair/002"][f"label:{REF}"], by_id["pair/002"][f"original:{REF}"]) == ("A", "B")
    assert by_id["pair-005"][f"label:{REF}"] in (None, "")


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_round_trip_payload_types(factory: sessionmaker[Session], tmp_path: Path, fmt: str) -> None:
    _add_typed_benchmark(factory)
    out = tmp_path / f"typed.{fmt}"
    with transaction(factory) as s:
        export_benchmark(s, TYPED, out)
    got = {r["external_id"]: r for r in _read(out, fmt)}
    expected = _expected(factory, TYPED)
    columns = ["external_id", "group_key", "flag", "meta", "mixed", "n", "text", "x"]
    assert list(got["t0"]) == [*columns, "label:truth", "original:truth"]
    if fmt == "jsonl":
        # JSON keeps every type; a missing field is null.
        for ext, want in expected.items():
            assert got[ext] == {"flag": None, **want}
    elif fmt == "csv":
        for ext, want in expected.items():
            assert got[ext] == {"flag": "", **{c: _csv_cell(v) for c, v in want.items()}}
    else:
        schema = pq.read_schema(out)
        types = {name: str(schema.field(name).type) for name in schema.names}
        assert (types["n"], types["x"], types["flag"], types["text"]) == (
            "int64",
            "double",
            "bool",
            "string",
        )
        assert (types["meta"], types["mixed"]) == ("string", "string")
        assert got["t0"]["text"] == got["t0"]["label:truth"] == NASTY
        assert (got["t0"]["n"], got["t1"]["n"], got["t2"]["n"]) == (1, -7, None)
        assert (got["t0"]["x"], got["t1"]["x"]) == (1.0, 2.5)
        assert (got["t0"]["flag"], got["t1"]["flag"], got["t2"]["flag"]) == (True, False, None)
        assert json.loads(got["t0"]["meta"]) == {"a": [1, "b"]}
        assert got["t1"]["meta"] is None
        assert json.loads(got["t2"]["meta"]) == {"ü": "ß"}
        assert [got[t]["mixed"] for t in ("t0", "t1", "t2")] == ["s", "3", "[1]"]


def test_changelog_file(seeded: sessionmaker[Session], tmp_path: Path) -> None:
    out = tmp_path / "release.jsonl"
    with transaction(seeded) as s:
        export_benchmark(s, PAIRWISE, out)
        expected = changelog(s, _bench_id(s))
    with open(changelog_path(out), encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert changelog_path(out).name == "release.changelog.csv"
    assert list(rows[0]) == list(CHANGE_COLUMNS)
    assert [r["external_id"] for r in rows] == ["pair-005", "pair/002"]  # export row order
    by_id = {r["external_id"]: r for r in rows}
    assert by_id["pair/002"] == {
        "external_id": "pair/002",
        "label": REF,
        "original": "B",
        "resolved": "A",
        "rule": "unanimous-votes",
        "authors": '["alice", "bob"]',
        "reasons": '["B is wrong", ""]',
        "tags": '["ambiguous", "typo"]',
        "decided_at": expected[1].decided_at.isoformat() if expected[1].decided_at else "",
    }
    assert (by_id["pair-005"]["resolved"], by_id["pair-005"]["rule"]) == ("", "adjudication")
    assert json.loads(by_id["pair-005"]["reasons"]) == ["broken item"]


def test_original_labels(seeded: sessionmaker[Session], tmp_path: Path) -> None:
    out = tmp_path / "original.csv"
    with transaction(seeded) as s:
        summary = export_benchmark(s, PAIRWISE, out, labels="original")
    got = {r["external_id"]: r for r in _read(out, "csv")}
    expected = _expected(seeded, PAIRWISE, labels="original")
    assert got == {e: {c: _csv_cell(v) for c, v in r.items()} for e, r in expected.items()}
    assert not any(c.startswith("original:") for c in got["pair/002"])
    assert (got["pair/002"][f"label:{REF}"], got["pair-005"][f"label:{REF}"]) == ("B", "B")
    assert summary.changed == 0
    # The changelog lists what this file changes: nothing.
    assert changelog_path(out).read_text(encoding="utf-8").splitlines() == [
        ",".join(CHANGE_COLUMNS)
    ]


@pytest.mark.parametrize(
    "flt",
    [
        InstanceFilter(slices=(SliceCondition(field="source", value="mmlu-pro-law"),)),
        InstanceFilter(labels=(LabelCondition(name=REF, value="B"),)),
        InstanceFilter(flip="yes"),
        InstanceFilter(q="café"),
    ],
    ids=["slice", "label", "flip", "search"],
)
def test_filtered_subset(
    seeded: sessionmaker[Session], tmp_path: Path, flt: InstanceFilter
) -> None:
    out = tmp_path / "subset.jsonl"
    with transaction(seeded) as s:
        page = benchmark_view(s, PAIRWISE, flt, page_size=500).table
        summary = export_benchmark(s, PAIRWISE, out, flt=flt)
    listed = [row["external_id"] for row in page.items]
    got = _read(out, "jsonl")
    assert listed, "every case keeps some rows"
    # Exactly the rows the instance table lists for the same filter, in the same order.
    assert [r["external_id"] for r in got] == listed
    assert summary.rows == page.total
    expected = _expected(seeded, PAIRWISE)
    assert all(r == expected[r["external_id"]] for r in got)
    with open(changelog_path(out), encoding="utf-8", newline="") as fh:
        changed = [r["external_id"] for r in csv.DictReader(fh)]
    assert set(changed) == {"pair/002", "pair-005"} & set(listed)
    assert summary.changed == len(changed)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_filter_without_matches(seeded: sessionmaker[Session], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"none.{fmt}"
    with transaction(seeded) as s:
        summary = export_benchmark(s, PAIRWISE, out, flt=InstanceFilter(q="no such text"))
    assert (summary.rows, summary.changed) == (0, 0)
    assert _read(out, fmt) == []
    if fmt == "parquet":
        assert pq.read_schema(out).names == [
            "external_id",
            "group_key",
            f"label:{FLIP}",
            f"original:{FLIP}",
            f"label:{REF}",
            f"original:{REF}",
        ]


def test_unknown_filter_names_are_refused(seeded: sessionmaker[Session], tmp_path: Path) -> None:
    flt = InstanceFilter(labels=(LabelCondition(name="nope", value="A"),))
    with transaction(seeded) as s, pytest.raises(InvalidInput, match="unknown label set"):
        export_benchmark(s, PAIRWISE, tmp_path / "x.jsonl", flt=flt)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_chunks_give_the_same_file(seeded: sessionmaker[Session], tmp_path: Path, fmt: str) -> None:
    whole, chunked = tmp_path / f"whole.{fmt}", tmp_path / f"chunked.{fmt}"
    with transaction(seeded) as s:
        export_benchmark(s, PAIRWISE, whole)
    with transaction(seeded) as s:
        export_benchmark(s, PAIRWISE, chunked, chunk_size=2)
    assert _read(chunked, fmt) == _read(whole, fmt)
    assert changelog_path(chunked).read_bytes() == changelog_path(whole).read_bytes(), (
        "changelog rows keep the row order across chunks"
    )
    if fmt == "parquet":
        assert pq.ParquetFile(chunked).metadata.num_row_groups == 3
    else:
        assert chunked.read_bytes() == whole.read_bytes()


def test_queries_per_chunk_not_per_instance(
    seeded: sessionmaker[Session], engine: Engine, tmp_path: Path
) -> None:
    counts = []
    for chunk_size in (6, 2, 1):
        with transaction(seeded) as s:
            s.connection()
            for seen in _count_statements(engine):
                export_benchmark(s, PAIRWISE, tmp_path / "x.jsonl", chunk_size=chunk_size)
                counts.append(len(seen))
    # Two queries per chunk (rows, label events) on top of a fixed few.
    assert counts[1] - counts[0] == 2 * (3 - 1)
    assert counts[2] - counts[0] == 2 * (6 - 1)


def _row_counts(factory: sessionmaker[Session]) -> dict[str, Any]:
    with transaction(factory) as s:
        counts: dict[str, Any] = {
            t.name: s.scalar(select(func.count()).select_from(t))
            for t in Base.metadata.sorted_tables
        }
        counts["versions"] = sorted(s.execute(select(Benchmark.name, Benchmark.data_version)))
        counts["last_event"] = s.scalar(select(func.max(LabelEvent.id)))
    return counts


def test_export_leaves_the_store_unchanged(seeded: sessionmaker[Session], tmp_path: Path) -> None:
    before = _row_counts(seeded)
    for fmt in ("jsonl", "csv", "parquet"):
        for labels in ("resolved", "original"):
            with transaction(seeded) as s:
                export_benchmark(s, PAIRWISE, tmp_path / f"x-{labels}.{fmt}", labels=labels)
    assert _row_counts(seeded) == before


def test_failed_export_leaves_nothing_half_written(
    seeded: sessionmaker[Session], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "release.parquet"
    out.write_bytes(b"previous release")
    calls = []
    real_fold = export_module.fold

    def failing_fold(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("disk full")
        return real_fold(*args, **kwargs)

    monkeypatch.setattr(export_module, "fold", failing_fold)
    with transaction(seeded) as s, pytest.raises(RuntimeError, match="disk full"):
        export_benchmark(s, PAIRWISE, out, chunk_size=2)
    # The earlier file is untouched, no changelog appeared, no temporary file is left.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release.parquet"]
    assert out.read_bytes() == b"previous release"


def test_export_errors(seeded: sessionmaker[Session], tmp_path: Path) -> None:
    with transaction(seeded) as s:
        with pytest.raises(InvalidInput, match="unknown file type"):
            export_benchmark(s, PAIRWISE, tmp_path / "x.xlsx")
        with pytest.raises(InvalidInput, match="no such directory"):
            export_benchmark(s, PAIRWISE, tmp_path / "missing" / "x.csv")
        with pytest.raises(InvalidInput, match="labels must be"):
            export_benchmark(s, PAIRWISE, tmp_path / "x.csv", labels="latest")
        with pytest.raises(InvalidInput, match="format must be"):
            export_benchmark(s, PAIRWISE, tmp_path / "x.csv", fmt="xlsx")
        with pytest.raises(InvalidInput, match="k must be"):
            export_benchmark(s, PAIRWISE, tmp_path / "x.csv", k=0)
        with pytest.raises(NotFound):
            export_benchmark(s, "no-such-bench", tmp_path / "x.csv")
        # An explicit format wins over the suffix.
        export_benchmark(s, PAIRWISE, tmp_path / "x.txt", fmt="jsonl")
    assert len(_read(tmp_path / "x.txt", "jsonl")) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.changelog.csv", "x.txt"]


# --- command line -------------------------------------------------------------------------


@pytest.fixture
def cli() -> typer.Typer:
    """A bare app with the export command, as the integrator mounts it."""
    app = typer.Typer()
    # A callback keeps "export" a subcommand (a lone command would become the app itself).
    app.callback()(lambda: None)
    register(app)
    return app


@pytest.fixture
def runner(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, seeded: sessionmaker[Session]
) -> CliRunner:
    """A runner pointed at the seeded test database."""
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    return CliRunner()


def test_cli_export(runner: CliRunner, cli: typer.Typer, tmp_path: Path) -> None:
    out = tmp_path / "release.parquet"
    result = runner.invoke(cli, ["export", PAIRWISE, str(out), "--labels", "resolved"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    assert lines[0] == (
        f"{PAIRWISE}: 6 rows, 2 label set(s) (resolved), 2 changed label(s); "
        f"wrote {out}, {changelog_path(out)}"
    )
    assert len(_read(out, "parquet")) == 6


def test_cli_filter_and_options(runner: CliRunner, cli: typer.Typer, tmp_path: Path) -> None:
    out = tmp_path / "law.data"
    url = "http://127.0.0.1:8000/benchmarks/jb-mini?slice=source%3Dmmlu-pro-law&page=2"
    args = ["export", PAIRWISE, str(out), "--format", "csv", "--labels", "original"]
    result = runner.invoke(cli, [*args, "--k", "1", "--filter", url])
    assert result.exit_code == 0, result.output
    assert "3 rows" in result.stdout and "(original)" in result.stdout
    assert [r["source"] for r in _read(out, "csv")] == ["mmlu-pro-law"] * 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-such-bench", "x.csv"], "no benchmark named"),
        ([PAIRWISE, "x.xlsx"], "unknown file type"),
        ([PAIRWISE, "x.csv", "--filter", "label=nope=A"], "unknown label set"),
        ([PAIRWISE, "x.csv", "--filter", "colour=red"], "unknown filter parameter"),
        ([PAIRWISE, "x.csv", "--filter", "flip=maybe"], "flip"),
        ([PAIRWISE, "x.csv", "--labels", "latest"], "latest"),
        ([PAIRWISE, "x.csv", "--k", "0"], "--k"),
    ],
)
def test_cli_errors(
    runner: CliRunner,
    cli: typer.Typer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(cli, ["export", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert list(tmp_path.iterdir()) == []


def test_parse_filter() -> None:
    assert parse_filter("label=reference%3DA&label=flip%3A%2Fj%3D&q=&flip=yes") == InstanceFilter(
        labels=(
            LabelCondition(name=REF, value="A"),
            LabelCondition(name="flip:/j", value=None),
        ),
        flip="yes",
    )
    assert parse_filter("https://h/benchmarks/b?score_min=0.5&page=3") == InstanceFilter(
        score_min=0.5
    )
    assert parse_filter("") == InstanceFilter()
