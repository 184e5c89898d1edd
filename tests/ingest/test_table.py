"""Generic table import from CSV, JSONL and Parquet: mapping, groups, labels, scores, streaming."""

from __future__ import annotations

import csv
import json
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import Conflict, InvalidInput
from app.ingest.table import import_table
from app.services.evidence.benchmarks import get_benchmark
from app.tables import Detector, ImportRecord, Instance, Score
from tests.ingest.test_helpers import current_labels, table_counts

ROWS = [
    {
        "qid": f"q{i}",
        "question": f"Question {i // 2}",
        "a": f'first, "quoted"\n{i}',
        "b": f"second {i}",
        "gold": "AB"[i % 2],
        "p_a": round(0.1 * i, 3),
        "pos": i % 3,
    }
    for i in range(10)
]
ROWS[3]["gold"] = ""  # an unlabelled pair
ROWS[4]["p_a"] = None  # an unscored pair


def _write(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        # Several row groups, so that the reader really walks them one by one.
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=3)
    return path


def _import(factory: sessionmaker[Session], path: Path, **kw):
    args = {
        "kind": "pairwise",
        "mapping": {"prompt": "question", "response_a": "a", "response_b": "b"},
        "group": "question",
        "labels": {"reference": "gold"},
        "scores": {"my-rm": "p_a"},
        "id_column": "qid",
        "benchmark": "pairs",
    } | kw
    with transaction(factory) as session:
        return import_table(session, path, **args)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_table_import_with_labels_and_scores(
    factory: sessionmaker[Session], tmp_path: Path, suffix: str
) -> None:
    path = _write(tmp_path / f"items{suffix}", ROWS)
    summary = _import(factory, path, chunk_size=4)
    assert (summary.instances_added, summary.labels_added, summary.scores_added) == (10, 9, 9)
    assert summary.data_version == 1
    with factory() as session:
        bench = get_benchmark(session, "pairs")
        instances = {i.external_id: i for i in session.scalars(select(Instance))}
        labels = current_labels(session, bench.id, "reference")
        scores = {
            ext: s
            for ext, s in session.execute(
                select(Instance.external_id, Score.score).join(
                    Score, Score.instance_id == Instance.id
                )
            )
        }
        detector = session.scalar(select(Detector).where(Detector.name == "my-rm"))
        record = session.scalar(select(ImportRecord))
    assert bench.kind == "pairwise"
    assert detector is not None and detector.kind == "external"
    assert record is not None and record.file_name == path.name and record.importer == "table"
    assert instances["q5"].payload == {
        "prompt": "Question 2",
        "response_a": 'first, "quoted"\n5',
        "response_b": "second 5",
    }
    assert instances["q5"].group_key == "Question 2" == instances["q4"].group_key
    assert labels == {r["qid"]: r["gold"] for r in ROWS if r["gold"]}
    assert scores == pytest.approx({r["qid"]: r["p_a"] for r in ROWS if r["p_a"] is not None})


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_table_reimport_is_idempotent_and_conflicts_are_refused(
    factory: sessionmaker[Session], tmp_path: Path, suffix: str
) -> None:
    path = _write(tmp_path / f"items{suffix}", ROWS)
    _import(factory, path)
    before = table_counts(factory)
    again = _import(factory, path)
    assert again.added == 0 and again.instances_skipped == 10 and again.scores_skipped == 9
    assert again.data_version == 1
    assert table_counts(factory) == before

    changed = [dict(r) for r in ROWS]
    changed[7]["p_a"] = 0.99
    # CSV: line 1 is the header and every record spans two lines (a quoted newline).
    line = 16 if suffix == ".csv" else 8
    path = _write(tmp_path / f"changed{suffix}", changed)
    with pytest.raises(Conflict) as err:
        _import(factory, path)
    assert str(err.value) == f"{path}:{line}: p_a: 'q7' already has score 0.7, the file gives 0.99"
    assert table_counts(factory) == before


def test_payload_conflict_names_the_column(factory: sessionmaker[Session], tmp_path: Path) -> None:
    _import(factory, _write(tmp_path / "items.csv", ROWS))
    changed = [dict(r) for r in ROWS]
    changed[2]["b"] = "rewritten"
    path = _write(tmp_path / "changed.csv", changed)
    with pytest.raises(Conflict) as err:
        _import(factory, path)
    assert str(err.value) == (
        f"{path}:6: b: instance 'q2' already exists with a different response_b: "
        "stored 'second 2', the file says 'rewritten'"
    )


def test_defaults_row_ids_own_groups_and_same_named_fields(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    path = tmp_path / "answers.csv"
    path.write_text("response,truth,other\nyes,1,x\nno,0.0,y\nmaybe,,z\n", encoding="utf-8")
    with transaction(factory) as session:
        summary = import_table(session, path, "response", labels={"truth": "truth"})
    assert summary.benchmark == "answers"  # from the file stem
    assert summary.labels_added == 2
    with factory() as session:
        rows = session.execute(
            select(Instance.external_id, Instance.group_key, Instance.payload).order_by(Instance.id)
        ).all()
        labels = current_labels(session, get_benchmark(session, "answers").id, "truth")
    assert [tuple(r) for r in rows] == [
        ("answers:1", "answers:1", {"response": "yes"}),
        ("answers:2", "answers:2", {"response": "no"}),
        ("answers:3", "answers:3", {"response": "maybe"}),
    ]
    assert labels == {"answers:1": "1", "answers:2": "0"}


def test_required_field_must_be_mapped(factory: sessionmaker[Session], tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("question,a\nQ,A\n", encoding="utf-8")
    with pytest.raises(InvalidInput) as err, transaction(factory) as session:
        import_table(session, path, "pairwise", {"prompt": "question", "response_a": "a"})
    assert err.value.message == (
        f"{path}:1: response_b: a pairwise instance needs payload field 'response_b': "
        "map a column to it"
    )


def test_kind_must_match_the_benchmark(factory: sessionmaker[Session], tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("statement,response\nS,R\n", encoding="utf-8")
    with transaction(factory) as session:
        import_table(session, path, "statement", benchmark="b")
    expected = "benchmark 'b' holds statement instances, not response"
    with pytest.raises(Conflict, match=expected), transaction(factory) as session:
        import_table(session, path, "response", benchmark="b")


def _peak_bytes(factory: sessionmaker[Session], path: Path, name: str) -> int:
    tracemalloc.start()
    try:
        with transaction(factory) as session:
            import_table(
                session,
                path,
                "response",
                id_column="id",
                group="group",
                labels={"truth": "label"},
                scores={"s": "score"},
                benchmark=name,
                chunk_size=250,
            )
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_import_streams_memory_does_not_grow_with_the_file(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    def make(n: int) -> Path:
        path = tmp_path / f"rows{n}.csv"
        with path.open("w", encoding="utf-8") as fh:
            fh.write("id,group,response,label,score\n")
            for i in range(n):
                fh.write(f"r{i},g{i // 4},{'response text ' * 8}{i},{i % 2},{i / n}\n")
        return path

    # A first import warms caches (compiled statements, type adapters) so they do not count.
    _peak_bytes(factory, make(500), "warm-up")
    small = _peak_bytes(factory, make(1_000), "small")
    large = _peak_bytes(factory, make(8_000), "large")
    # Eight times the rows, about the same peak: the file is never held whole.
    assert large < 1.3 * small, (small, large)


TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r"),
    max_size=40,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(TEXT, min_size=1, max_size=6))
def test_csv_text_round_trips_exactly(
    factory: sessionmaker[Session], tmp_path_factory: pytest.TempPathFactory, texts: list[str]
) -> None:
    path = tmp_path_factory.mktemp("rt") / "texts.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["statement"])
        writer.writerows([t] for t in texts)
    name = f"rt-{path.parent.name}"
    with transaction(factory) as session:
        import_table(session, path, "statement", benchmark=name)
    with factory() as session:
        bench = get_benchmark(session, name)
        stored = session.scalars(
            select(Instance.payload).where(Instance.benchmark_id == bench.id).order_by(Instance.id)
        ).all()
    # csv.writer quotes a lone empty field, so even "" comes back (not as a skipped blank line).
    assert [p["statement"] for p in stored] == texts
