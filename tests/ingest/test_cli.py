"""``appellate import ...``: one transaction per command, a summary line, errors exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.services.evidence.benchmarks import get_benchmark
from app.settings import Settings
from app.tables import Detector, Instance
from tests.conftest import DATA
from tests.ingest.test_helpers import (
    O1_MINI,
    O1_MINI_JUDGE,
    PAIRS,
    PAIRS_GPT4O,
    current_labels,
    read_jsonl,
    table_counts,
)


@pytest.fixture
def runner(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A CLI runner whose environment points the app at the test database."""
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    return CliRunner()


def _ok(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(cli, ["import", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_judgebench_command(runner: CliRunner, factory: sessionmaker[Session]) -> None:
    args = ["judgebench", *map(str, PAIRS), "--outputs", str(O1_MINI)]
    out = _ok(runner, *args)
    assert out.startswith("judgebench: 3 file(s); instances +620 (350 present)")
    assert "judgments +700" in out and "derived labels +350" in out
    with factory() as session:
        bench = get_benchmark(session, "judgebench")
        flips = current_labels(session, bench.id, f"flip:{O1_MINI_JUDGE}")
    assert sum(v == "1" for v in flips.values()) == 110
    before = table_counts(factory)
    again = _ok(runner, *args)
    assert "instances +0 (970 present)" in again and "judgments +0 (700 present)" in again
    assert table_counts(factory) == before


def test_statements_command_into_one_benchmark(
    runner: CliRunner, factory: sessionmaker[Session]
) -> None:
    files = [DATA / "truth" / "element_symb.csv", DATA / "truth" / "neg_element_symb.csv"]
    out = _ok(runner, "statements", *map(str, files), "--benchmark", "elements")
    lines = out.strip().splitlines()
    assert len(lines) == 2
    assert all(line.startswith("elements: 1 file(s); instances +186") for line in lines)
    with factory() as session:
        assert len(current_labels(session, get_benchmark(session, "elements").id, "truth")) == 372


def test_table_command(runner: CliRunner, factory: sessionmaker[Session], tmp_path: Path) -> None:
    path = tmp_path / "judged.jsonl"
    rows = [
        {
            "key": f"k{i}",
            "q": f"question {i // 2}",
            "x": "one",
            "y": "two",
            "gold": "AB"[i % 2],
            "prob": i / 10,
        }
        for i in range(6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = _ok(
        runner,
        "table", str(path), "--kind", "pairwise", "--map", "prompt=q", "--map", "response_a=x",
        "--map", "response_b=y", "--group", "q", "--label", "reference=gold",
        "--score", "my-rm=prob", "--id", "key", "--benchmark", "mine",
    )  # fmt: skip
    assert out.startswith("mine: 1 file(s); instances +6 (0 present); labels +6")
    assert "scores +6" in out
    with factory() as session:
        inst = session.scalar(select(Instance).where(Instance.external_id == "k3"))
        detector = session.scalar(select(Detector).where(Detector.name == "my-rm"))
    assert inst is not None and inst.group_key == "question 1"
    assert inst.payload == {"prompt": "question 1", "response_a": "one", "response_b": "two"}
    assert detector is not None and detector.kind == "external"


def test_mtbench_command(runner: CliRunner, factory: sessionmaker[Session]) -> None:
    out = _ok(
        runner,
        "mtbench",
        "--questions", str(DATA / "mt-bench" / "question.jsonl"),
        "--answers", str(DATA / "mt-bench" / "model_answer"),
        "--models", "gpt-4,claude-v1",
    )  # fmt: skip
    assert out.startswith("mt-bench: 3 file(s); instances +80 (0 present)")
    assert table_counts(factory)["instances"] == 80


def test_bad_input_exits_2_with_the_location(
    runner: CliRunner, factory: sessionmaker[Session], tmp_path: Path
) -> None:
    _ok(runner, "statements", str(DATA / "truth" / "animal_class.csv"))
    before = table_counts(factory)
    rows = read_jsonl(PAIRS_GPT4O)[:5]
    rows[3]["label"] = "A>>B"
    bad = tmp_path / "pairs.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    # The good file comes first: its rows are written, then rolled back with the bad one.
    result = runner.invoke(cli, ["import", "judgebench", str(PAIRS[0]), str(bad)])
    assert result.exit_code == 2
    assert result.stderr == f"error: {bad}:4: label: expected 'A>B' or 'B>A', got 'A>>B'\n"
    assert result.stdout == ""
    assert "Traceback" not in result.output
    assert table_counts(factory) == before


def test_conflict_exits_2(
    runner: CliRunner, factory: sessionmaker[Session], tmp_path: Path
) -> None:
    path = tmp_path / "s.csv"
    path.write_text("statement,label\nSnow is white.,1\n", encoding="utf-8")
    _ok(runner, "statements", str(path))
    before = table_counts(factory)
    path.write_text("statement,label\nSnow is white.,0\n", encoding="utf-8")
    result = runner.invoke(cli, ["import", "statements", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {path}:2: label: label 'truth' of 's:1' was imported")
    assert table_counts(factory) == before


def test_malformed_mapping_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("statement\nS\n", encoding="utf-8")
    result = runner.invoke(
        cli, ["import", "table", str(path), "--kind", "statement", "--label", "truth"]
    )
    assert result.exit_code == 2
    assert "expected NAME=COLUMN, got 'truth'" in result.output


def test_a_reserved_benchmark_name_is_refused_and_nothing_is_written(
    runner: CliRunner, factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """/benchmarks/new is the upload form: a benchmark called "new" would have no page."""
    path = tmp_path / "t.csv"
    path.write_text("statement,label\nS,true\n", encoding="utf-8")
    before = table_counts(factory)
    result = runner.invoke(
        cli,
        ["import", "table", str(path), "--kind", "statement", "--benchmark", "new",
         "--map", "statement=statement", "--label", "truth=label"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "'new' is the path of the upload page" in result.stderr
    assert table_counts(factory) == before
