"""``import table`` on JSON arrays and nested ``--map`` paths (issue 22 item 7), both databases.

Rows shaped like lm-evaluation-harness samples: the text under ``doc``, the options a list,
scores and the gold answer nested. Paths are ``doc.question``, ``doc.choices.0`` or
``doc.choices[0]``; a path that does not resolve on a row names that row's line and the path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.errors import InvalidInput
from app.ingest.paths import FieldPath, parse_path
from app.ingest.table import import_table
from app.services.evidence.benchmarks import get_benchmark
from app.settings import Settings
from app.tables import Instance, Score
from tests.ingest.test_helpers import current_labels, table_counts

ROWS: list[dict[str, Any]] = [
    {
        "doc": {
            "id": f"d{i}",
            "question": f"Which is better, {i}?",
            "responses": [f"first answer {i}", f"second answer {i}"],
        },
        "meta": {"gold": "AB"[i % 2], "scores": {"rm": round(0.1 * i, 2)}},
    }
    for i in range(9)
]
MAPPING = {
    "prompt": "doc.question",
    "response_a": "doc.responses.0",  # both index syntaxes
    "response_b": "doc.responses[1]",
}


def _json_array(path: Path, rows: list[dict[str, Any]]) -> Path:
    """One element per line: element ``i`` starts on line ``i + 2`` (``[`` is line 1)."""
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n", encoding="utf-8")
    return path


def _import(factory: sessionmaker[Session], path: Path, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "kind": "pairwise",
        "mapping": MAPPING,
        "labels": {"reference": "meta.gold"},
        "scores": {"rm": "meta.scores.rm"},
        "id_column": "doc.id",
        "benchmark": "nested",
    } | kw
    with transaction(factory) as session:
        return import_table(session, path, **args)


def _stored(factory: sessionmaker[Session]) -> tuple[dict[str, Any], dict[str, Any], dict]:
    with factory() as session:
        bench = get_benchmark(session, "nested")
        payloads = {i.external_id: i.payload for i in session.scalars(select(Instance))}
        labels = current_labels(session, bench.id, "reference")
        scores = dict(
            session.execute(
                select(Instance.external_id, Score.score).join(
                    Score, Score.instance_id == Instance.id
                )
            ).all()
        )
    return payloads, labels, scores


def test_paths_parse_in_both_index_syntaxes() -> None:
    # ".0" stays a key, read as an index when the value is a list.
    assert parse_path("doc.choices.0") == ("doc", "choices", "0")
    assert parse_path("doc.choices[0]") == ("doc", "choices", 0)
    assert parse_path("a[1][2].b") == ("a", 1, 2, "b")
    for bad in ("doc..x", "doc[x]", "doc[1", ".doc"):
        with pytest.raises(ValueError):
            parse_path(bad)
    data = {"doc": {"choices": ["x", "y"], "0": "key zero"}}
    assert FieldPath.of("doc.choices.1").get(data) == "y"
    assert FieldPath.of("doc.choices[1]").get(data) == "y"
    assert FieldPath.of("doc.0").get(data) == "key zero"  # .N on an object is its key "N"
    # A name that is itself a key (a flattened table's "doc.question") is read whole.
    assert FieldPath.of("doc.question").get({"doc.question": "flat"}) == "flat"


def test_a_json_array_imports_with_nested_paths(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    path = _json_array(tmp_path / "samples.json", ROWS)
    summary = _import(factory, path, chunk_size=4)
    assert (summary.instances_added, summary.labels_added, summary.scores_added) == (9, 9, 9)
    payloads, labels, scores = _stored(factory)
    assert payloads["d4"] == {
        "prompt": "Which is better, 4?",
        "response_a": "first answer 4",
        "response_b": "second answer 4",
    }
    assert labels == {f"d{i}": "AB"[i % 2] for i in range(9)}
    assert scores == pytest.approx({f"d{i}": round(0.1 * i, 2) for i in range(9)})


def test_reimport_is_idempotent(factory: sessionmaker[Session], tmp_path: Path) -> None:
    path = _json_array(tmp_path / "samples.json", ROWS)
    _import(factory, path)
    before = table_counts(factory)
    again = _import(factory, path)
    assert again.added == 0 and again.instances_skipped == 9 and again.scores_skipped == 9
    assert table_counts(factory) == before


@pytest.mark.parametrize(
    ("column", "broken", "reason"),
    [
        (
            "doc.responses[1]",
            {"responses": ["only one"]},
            "no item 1 in doc.responses (a list of 1)",
        ),
        ("doc.question", {"question": None, "text": "moved"}, None),
        ("meta.gold", "meta", "no key 'meta'"),
    ],
)
def test_a_path_missing_on_one_row_names_its_line_and_leaves_the_store(
    factory: sessionmaker[Session],
    tmp_path: Path,
    column: str,
    broken: Any,
    reason: str | None,
) -> None:
    _import(factory, _json_array(tmp_path / "first.json", ROWS[:2]))
    before = table_counts(factory)
    rows = [json.loads(json.dumps(r)) for r in ROWS]
    if broken == "meta":
        del rows[5]["meta"]
    elif reason is None:
        del rows[5]["doc"]["question"]
        reason = "no key 'question' in doc"
    else:
        rows[5]["doc"].update(broken)
    path = _json_array(tmp_path / "broken.json", rows)
    with pytest.raises(InvalidInput) as err:
        _import(factory, path)
    # Element 5 starts on line 7 (line 1 is the opening bracket).
    assert err.value.message == f"{path}:7: {column}: {reason}"
    assert table_counts(factory) == before


def test_a_path_into_a_string_is_refused(factory: sessionmaker[Session], tmp_path: Path) -> None:
    rows = [json.loads(json.dumps(r)) for r in ROWS[:3]]
    rows[2]["doc"]["responses"] = "not a list"
    path = _json_array(tmp_path / "samples.json", rows)
    with pytest.raises(InvalidInput) as err:
        _import(factory, path)
    assert err.value.message == (
        f"{path}:4: doc.responses.0: doc.responses is string, not a list: no '0' in it"
    )
    assert table_counts(factory)["instances"] == 0


def test_parquet_struct_and_list_columns_take_paths(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    path = tmp_path / "samples.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path, row_group_size=4)
    summary = _import(factory, path)
    assert summary.instances_added == 9 and summary.scores_added == 9
    payloads, labels, _ = _stored(factory)
    assert payloads["d7"]["response_b"] == "second answer 7"
    assert labels["d7"] == "B"


def test_a_path_into_no_column_is_refused_before_reading(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    path = tmp_path / "samples.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    with pytest.raises(InvalidInput) as err:
        _import(factory, path, id_column="document.id")
    assert err.value.message == f"{path}: document.id: missing column"
    assert table_counts(factory)["instances"] == 0


def test_a_flattened_csv_column_with_dots_is_read_whole(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    path = tmp_path / "flat.csv"
    path.write_text("doc.id,doc.text,meta.gold\nx1,Water is wet.,1\nx2,Fire is cold.,0\n")
    with transaction(factory) as session:
        import_table(
            session,
            path,
            "statement",
            {"statement": "doc.text"},
            labels={"truth": "meta.gold"},
            id_column="doc.id",
            benchmark="flat",
        )
    with factory() as session:
        got = {i.external_id: i.payload for i in session.scalars(select(Instance))}
    assert got == {"x1": {"statement": "Water is wet."}, "x2": {"statement": "Fire is cold."}}


def test_the_cli_maps_nested_paths_of_a_json_array(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    factory: sessionmaker[Session],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    path = _json_array(tmp_path / "samples.json", ROWS)
    args = [
        "import", "table", str(path), "--kind", "pairwise", "--benchmark", "nested",
        "--map", "prompt=doc.question", "--map", "response_a=doc.responses.0",
        "--map", "response_b=doc.responses[1]", "--id", "doc.id",
        "--label", "reference=meta.gold", "--score", "rm=meta.scores.rm",
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("nested: 1 file(s); instances +9 (0 present); labels +9")
    payloads, _, scores = _stored(factory)
    assert payloads["d8"]["response_a"] == "first answer 8"
    assert scores["d8"] == pytest.approx(0.8)
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0 and "instances +0 (9 present)" in again.stdout
