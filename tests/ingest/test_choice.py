"""Choice and answer benchmarks: the MMLU-Redux importer, choice/answer tables, predictions."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli.imports import import_app
from app.db import transaction
from app.errors import Conflict, InvalidInput
from app.ingest.mmlu_redux import import_mmlu_redux
from app.ingest.table import MAX_DETECTORS_PER_IMPORT, import_table
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.graders import benchmark_grader
from app.services.evidence.labelled_items import load_labelled
from app.settings import Settings
from app.tables import Detector, Instance, Prediction
from tests.conftest import DATA
from tests.ingest.test_helpers import current_labels, table_counts

MMLU = DATA / "mmlu-redux"
ASTRONOMY = MMLU / "astronomy.csv"


def _labels(session: Session, benchmark: str, *names: str) -> dict[str, dict[str, str | None]]:
    """``{external_id: {label set: current value}}`` of the named label sets."""
    bench = get_benchmark(session, benchmark)
    out: dict[str, dict[str, str | None]] = {}
    for name in names:
        for external_id, value in current_labels(session, bench.id, name).items():
            out.setdefault(external_id, {})[name] = value
    return out


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_mmlu_redux_subject_file(factory: sessionmaker[Session]) -> None:
    rows = _csv_rows(ASTRONOMY)
    with transaction(factory) as session:
        summary = import_mmlu_redux(session, [ASTRONOMY], "mmlu")
    models = [c for c in rows[0] if c not in ("question", "choices") and "_" in c and "-" in c]
    assert len(models) == 14
    assert summary.instances_added == len(rows) == 100
    answered = sum(1 for r in rows for m in models if r[m].strip())
    assert summary.predictions_added == answered
    with factory() as session:
        bench = get_benchmark(session, "mmlu")
        assert bench.kind == "choice"
        first = session.scalar(
            select(Instance).where(
                Instance.external_id == "astronomy:1", Instance.benchmark_id == bench.id
            )
        )
        assert first is not None and first.group_key == "astronomy"
        assert first.payload["question"] == rows[0]["question"]
        assert first.payload["subject"] == "astronomy"
        assert len(first.payload["options"]) == 4 and all(
            isinstance(o, str) for o in first.payload["options"]
        )
        labels = _labels(session, "mmlu", "reference", "errata", "defect")
        # Label sets from the CSV: reference as a letter, errata as written, defect derived.
        for i, row in enumerate(rows, start=1):
            got = labels[f"astronomy:{i}"]
            assert got["reference"] == "ABCD"[int(row["groundtruth_answer"])]
            assert got["errata"] == row["error_type"]
            assert got["defect"] == ("0" if row["error_type"] == "ok" else "1")
        kinds = set(session.scalars(select(Detector.kind).where(Detector.name.in_(models))))
        assert kinds == {"model"}
        model = models[0]
        stored = dict(
            session.execute(
                select(Instance.external_id, Prediction.answer)
                .join(Prediction, Prediction.instance_id == Instance.id)
                .join(Detector, Detector.id == Prediction.detector_id)
                .where(Detector.name == model)
            ).all()
        )
        assert stored == {f"astronomy:{i}": r[model] for i, r in enumerate(rows, 1) if r[model]}


@pytest.mark.slow
def test_mmlu_redux_folder_is_idempotent(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        first = import_mmlu_redux(session, [MMLU], "mmlu")
    assert first.instances_added == 2900 and len(first.files) == 29
    assert first.labels_added == 3 * 2900
    with transaction(factory) as session:
        again = import_mmlu_redux(session, [MMLU], "mmlu")
    assert again.added == 0 and again.instances_skipped == 2900
    assert again.predictions_skipped == first.predictions_added
    with factory() as session:
        n_models = session.scalar(select(func.count(func.distinct(Prediction.detector_id))))
    assert n_models == 14


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("choices", "['a', 'b', __import__('os').system('true')]", "not a list literal"),
        ("choices", "['only one']", "expected 2 to 26 options"),
        ("choices", "[1, 2, 3]", "option 1 is a int"),
        ("choices", "{'a': 1}", "expected a list of options"),
        ("groundtruth_answer", "4", "expected an option letter A-D or an index 0-3"),
    ],
)
def test_a_malformed_cell_is_refused_and_changes_nothing(
    factory: sessionmaker[Session], tmp_path: Path, column: str, value: str, reason: str
) -> None:
    rows = _csv_rows(ASTRONOMY)[:5]
    rows[2][column] = value
    bad = _write_csv(tmp_path / "astronomy.csv", rows)
    before = table_counts(factory)
    with pytest.raises(InvalidInput) as caught, transaction(factory) as session:
        import_mmlu_redux(
            session,
            [MMLU / "abstract_algebra.csv", bad],
            "mmlu",
        )
    assert str(caught.value).startswith(f"{bad}:4: {column}: {reason}")
    assert table_counts(factory) == before


def test_an_answer_naming_no_option_is_kept_as_given(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    rows = _csv_rows(ASTRONOMY)[:3]
    model = "openai_gpt-4o-2024-05-13"
    rows[0][model], rows[1][model], rows[2][model] = "The", "", "c"
    path = _write_csv(tmp_path / "astronomy.csv", rows)
    with transaction(factory) as session:
        summary = import_mmlu_redux(session, [path], "mmlu")
    assert summary.predictions_added == 3 * 14 - 1
    with factory() as session:
        answers = sorted(
            session.scalars(
                select(Prediction.answer)
                .join(Detector, Detector.id == Prediction.detector_id)
                .where(Detector.name == model)
            )
        )
    assert answers == ["The", "c"]


def test_a_changed_answer_is_a_conflict(factory: sessionmaker[Session], tmp_path: Path) -> None:
    rows = _csv_rows(ASTRONOMY)[:3]
    model = "openai_gpt-4o-2024-05-13"
    with transaction(factory) as session:
        import_mmlu_redux(session, [_write_csv(tmp_path / "astronomy.csv", rows)], "mmlu")
    rows[1][model] = "D" if rows[1][model] != "D" else "A"
    changed = _write_csv(tmp_path / "astronomy.csv", rows)
    with pytest.raises(Conflict) as caught, transaction(factory) as session:
        import_mmlu_redux(session, [changed], "mmlu")
    assert str(caught.value).startswith(f"{changed}:3: {model}: 'astronomy:2' already has answer")


CHOICE_ROWS = [
    {"id": f"q{i}", "q": f"Question {i}?", "a": f"yes {i}", "b": f"no {i}", "c": "maybe",
     "gold": "ABC"[i % 3], "m1": "ABC"[i % 3], "m2": "A", "topic": "t" + str(i % 2)}
    for i in range(6)
]  # fmt: skip


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_choice_table_with_one_column_per_option(
    factory: sessionmaker[Session], tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / f"items{suffix}"
    if suffix == ".csv":
        _write_csv(path, CHOICE_ROWS)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in CHOICE_ROWS), encoding="utf-8")
    with transaction(factory) as session:
        summary = import_table(
            session,
            path,
            "choice",
            {"question": "q", "topic": "topic"},
            id_column="id",
            group="topic",
            labels={"reference": "gold"},
            option_columns={"A": "a", "B": "b", "C": "c"},
            answers={"m1": "m1", "m2": "m2"},
        )
    assert summary.instances_added == 6 and summary.predictions_added == 12
    with factory() as session:
        inst = session.scalar(select(Instance).where(Instance.external_id == "q4"))
        assert inst is not None
        assert inst.payload == {
            "question": "Question 4?",
            "topic": "t0",
            "options": ["yes 4", "no 4", "maybe"],
        }
        assert inst.group_key == "t0"
        assert _labels(session, "items", "reference")["q4"] == {"reference": "B"}


def test_choice_table_errors(factory: sessionmaker[Session], tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "items.csv", CHOICE_ROWS)
    common = {"kind": "choice", "mapping": {"question": "q"}, "labels": {"reference": "gold"}}
    cases = [
        ({}, "needs its options"),
        ({"options": "a", "option_columns": {"A": "a", "B": "b"}}, "needs its options"),
        ({"option_columns": {"A": "a", "C": "b"}}, "lettered A, B, C"),
        ({"options": "a"}, "not a list literal"),
    ]
    for extra, message in cases:
        with pytest.raises(InvalidInput, match=message), transaction(factory) as session:
            import_table(session, path, **common, **extra)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="no options"), transaction(factory) as session:
        import_table(session, path, "statement", {"statement": "q"}, options="a")
    with (
        pytest.raises(InvalidInput, match="belong to choice and answer"),
        transaction(factory) as session,
    ):
        import_table(session, path, "statement", {"statement": "q"}, answers={"m": "m1"})


ANSWER_ROWS = [
    {"question": "2 + 2?", "gold": "4", "m1": "The answer is 4.", "m2": "4.0", "m3": "five"},
    {"question": "Half of 7?", "gold": "3.5", "m1": "3.5", "m2": "about 3", "m3": "3.5"},
    {"question": "1,000 + 1?", "gold": "1001", "m1": "1,001", "m2": "", "m3": "1000"},
]


def test_answer_table_with_a_grader_through_the_cli(
    factory: sessionmaker[Session],
    tmp_path: Path,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "arith.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ANSWER_ROWS), encoding="utf-8")
    for name, value in settings.model_dump(mode="json").items():
        if value is not None:
            monkeypatch.setenv(f"APPELLATE_{name.upper()}", str(value))
    args = ["table", str(path), "--kind", "answer", "--reference", "gold", "--grader", "numeric"]
    args += [a for m in ("m1", "m2", "m3") for a in ("--answers", f"{m}={m}")]
    result = CliRunner().invoke(import_app, args)
    assert result.exit_code == 0, result.output
    assert "predictions +8 (0 present)" in result.output
    with factory() as session:
        bench = get_benchmark(session, "arith")
        assert bench.kind == "answer" and bench.details == {"grader": "numeric"}
        grader = benchmark_grader(bench)
        labels = _labels(session, "arith", "reference")
        assert labels["arith:3"] == {"reference": "1001"}
        answers = session.execute(
            select(Instance.external_id, Detector.name, Prediction.answer)
            .join(Prediction, Prediction.instance_id == Instance.id)
            .join(Detector, Detector.id == Prediction.detector_id)
        ).all()
        graded = {(e, d): grader.grade(a, labels[e]["reference"]) for e, d, a in answers}
    assert graded == {
        ("arith:1", "m1"): True, ("arith:1", "m2"): True, ("arith:1", "m3"): False,
        ("arith:2", "m1"): True, ("arith:2", "m2"): False, ("arith:2", "m3"): True,
        ("arith:3", "m1"): True, ("arith:3", "m3"): False,
    }  # fmt: skip
    # Another grader for the same benchmark is refused.
    again = CliRunner().invoke(import_app, [*args[:-2], "--grader", "exact"])
    assert again.exit_code == 2 and "grades answers with 'numeric'" in again.output


def _wide_mmlu(path: Path, models: int) -> Path:
    """An MMLU-Redux subject file of two rows with ``models`` model columns."""
    names = [f"model-{k:05d}" for k in range(models)]
    rows = [
        {"question": f"Q{i}?", "choices": "['a', 'b', 'c', 'd']", "answer": "1",
         "error_type": "ok", **{n: "A" for n in names}}
        for i in range(2)
    ]  # fmt: skip
    return _write_csv(path, rows)


def test_a_file_with_too_many_model_columns_is_refused_and_changes_nothing(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """Issue 21 item 17: 100,000 stray columns made 100,000 detectors, one INSERT each."""
    path = _wide_mmlu(tmp_path / "wide.csv", MAX_DETECTORS_PER_IMPORT + 1)
    before = table_counts(factory)
    with pytest.raises(InvalidInput) as err, transaction(factory) as session:
        import_mmlu_redux(session, [path], "wide")
    assert (err.value.file, err.value.line, err.value.field) == (str(path), 1, "columns")
    assert f"at most {MAX_DETECTORS_PER_IMPORT:,}" in err.value.message
    assert table_counts(factory) == before


def test_many_model_columns_become_detectors_in_one_batched_write(
    factory: sessionmaker[Session], engine: Engine, tmp_path: Path
) -> None:
    path = _wide_mmlu(tmp_path / "many.csv", 300)
    inserts: list[str] = []

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO DETECTORS"):
            inserts.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        with transaction(factory) as session:
            import_mmlu_redux(session, [path], "many")
    finally:
        event.remove(engine, "before_cursor_execute", count)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(Detector)) == 300
        assert session.scalar(select(func.count()).select_from(Prediction)) == 600
    assert 1 <= len(inserts) <= 3, len(inserts)  # batches, not one statement per detector


def test_an_empty_error_type_is_no_annotation_and_no_defect(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    rows = _csv_rows(ASTRONOMY)[:6]
    rows[1]["error_type"], rows[2]["error_type"] = "", "  "
    rows[3]["error_type"] = "wrong_groundtruth"
    path = _write_csv(tmp_path / "astronomy.csv", rows)
    with transaction(factory) as session:
        import_mmlu_redux(session, [path], "mmlu")
    with factory() as session:
        labels = _labels(session, "mmlu", "errata", "defect")
        defect = load_labelled(session, "mmlu", "defect")
    # Rows 2 and 3 (unannotated) carry neither label; the rest carry both, derived alike.
    assert set(labels) == {f"astronomy:{i}" for i in (1, 4, 5, 6)}
    for external_id, row in zip((f"astronomy:{i}" for i in range(1, 7)), rows, strict=True):
        if external_id in labels:
            want = "0" if row["error_type"] == "ok" else "1"
            assert labels[external_id] == {"errata": row["error_type"], "defect": want}
    # The metrics' items: the unannotated rows are neither defects nor clean items.
    assert sorted(defect.external_ids) == sorted(labels)
    want_defects = sum(row["error_type"] not in ("ok", "", "  ") for row in rows)
    assert int(defect.y.sum()) == want_defects
