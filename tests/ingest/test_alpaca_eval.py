"""AlpacaEval annotations: one-order judgments, scores and refusals, against the raw arrays.

AlpacaEval's annotations are CC BY-NC: the real files are read from ../shared when present and
never copied here; the always-run tests use a hand-written file in the same schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.errors import InvalidInput
from app.ingest.alpaca_eval import import_alpaca_eval, instruction_group
from app.ingest.records import ImportSummary
from app.services.metrics.judge_summary import judge_summaries
from app.tables import Detector, Instance, Judgment, LabelEvent, Score
from tests.ingest.test_helpers import FORMATS, SHARED_FORMATS, table_counts

HAND_WRITTEN = FORMATS / "alpaca_eval" / "annotations.json"
SHARED = SHARED_FORMATS / "alpaca_eval"
SOURCES = [
    pytest.param(HAND_WRITTEN, id="hand-written"),
    pytest.param(
        SHARED,
        id="shared",
        marks=pytest.mark.skipif(
            not SHARED.is_dir(),
            reason=f"{SHARED} is absent (AlpacaEval's CC BY-NC data is never copied into git)",
        ),
    ),
]


def _import(factory: sessionmaker[Session], paths: list[Path], **kw: Any) -> ImportSummary:
    with transaction(factory) as session:
        return import_alpaca_eval(session, paths, **kw)


def _raw(root: Path) -> list[dict[str, Any]]:
    files = [root] if root.is_file() else sorted(root.rglob("annotations.json"))
    return [row for path in files for row in json.loads(path.read_text(encoding="utf-8"))]


def _identity(preference: float | None) -> str:
    if preference is None:
        return "invalid"
    if preference in (0, 1.5):
        return "tie"
    return "A" if preference < 1.5 else "B"


@pytest.mark.parametrize("root", SOURCES)
def test_counts_equal_the_raw_arrays(factory: sessionmaker[Session], root: Path) -> None:
    raw = _raw(root)
    summary = _import(factory, [root])
    keys = {(r["dataset"], r["instruction"], r["generator_1"], r["generator_2"]) for r in raw}
    assert summary.instances_added == len(keys) == len(raw)
    assert summary.judgments_added == len(raw)
    assert summary.scores_added == sum(r["preference"] is not None for r in raw)
    assert summary.derived_labels == 0
    expected = {
        f"{instruction_group(r['dataset'], r['instruction'])}:"
        f"{r['generator_1']}|{r['generator_2']}": (_identity(r["preference"]), r["preference"])
        for r in raw
    }
    with factory() as session:
        q = select(Instance.external_id, Judgment.order, Judgment.choice, Judgment.details).join(
            Judgment, Judgment.instance_id == Instance.id
        )
        stored = {
            ext: (order, choice, details) for ext, order, choice, details in session.execute(q)
        }
        assert {k: v[1] for k, v in stored.items()} == {k: v[0] for k, v in expected.items()}
        assert {v[0] for v in stored.values()} == {"AB"}
        assert all(v[2]["single_order"] is True for v in stored.values())
        assert {k: v[2]["preference"] for k, v in stored.items()} == {
            k: v[1] for k, v in expected.items()
        }
        scores = dict(
            session.execute(
                select(Instance.external_id, Score.score).join(
                    Score, Score.instance_id == Instance.id
                )
            ).all()
        )
        assert scores == {
            k: pytest.approx(0.5 if v[1] == 0 else 2 - v[1])
            for k, v in expected.items()
            if v[1] is not None
        }
        detectors = session.scalars(select(Detector.details)).all()
        assert detectors and all(d["single_order"] is True for d in detectors)
        # One order only: no flip labels, and no two-order judge summary.
        assert session.scalar(select(func.count()).select_from(LabelEvent)) == 0
        assert judge_summaries(session, "alpaca-eval", resamples=10) == []


@pytest.mark.parametrize("root", SOURCES)
def test_a_second_import_changes_nothing(factory: sessionmaker[Session], root: Path) -> None:
    first = _import(factory, [root])
    before = table_counts(factory)
    again = _import(factory, [root])
    assert table_counts(factory) == before
    assert again.added == 0 and again.data_version == first.data_version
    assert again.judgments_skipped == first.judgments_added
    assert again.scores_skipped == first.scores_added


def test_hand_written_items(factory: sessionmaker[Session]) -> None:
    _import(factory, [HAND_WRITTEN])
    with factory() as session:
        item = session.scalar(
            select(Instance).where(Instance.payload["prompt"].as_string() == "Solve 2x + 3 = 11.")
        )
        assert item is not None
        assert item.group_key == instruction_group("vicuna", "Solve 2x + 3 = 11.")
        assert item.payload == {
            "prompt": "Solve 2x + 3 = 11.",
            "response_a": "x = 4",
            "response_b": "x = 5",
            "model_a": "text_davinci_003",
            "model_b": "tiny-model-v1",
            "dataset": "vicuna",
        }
        weighted = session.scalars(
            select(Judgment).where(Judgment.raw_output != "").order_by(Judgment.id)
        ).all()
    # The completion text of the weighted annotator (its log-probabilities are not kept).
    assert [j.raw_output for j in weighted] == ["m", "M", "m"]
    assert [j.choice for j in weighted] == ["tie", "A", "B"]
    assert weighted[1].details["price_per_example"] == 0.0077


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "annotations.json"
    path.write_text(text, encoding="utf-8")
    return path


def test_bad_preference_is_refused_at_the_line_its_element_starts(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    rows = json.loads(HAND_WRITTEN.read_text(encoding="utf-8"))
    rows[3]["preference"] = 3
    text = json.dumps(rows, indent=2)
    starts = [n for n, line in enumerate(text.splitlines(), 1) if line == "  {"]
    assert len(starts) == len(rows)
    path = _write(tmp_path, text)
    before = table_counts(factory)
    with pytest.raises(InvalidInput) as info:
        _import(factory, [path])
    assert str(info.value) == (
        f"{path}:{starts[3]}: preference: expected a number from 1 (output_1) to 2 (output_2), "
        "0 or 1.5 (a draw) or null, got 3"
    )
    assert table_counts(factory) == before


def test_a_missing_field_is_named(factory: sessionmaker[Session], tmp_path: Path) -> None:
    rows = json.loads(HAND_WRITTEN.read_text(encoding="utf-8"))
    del rows[0]["generator_2"]
    path = _write(tmp_path, json.dumps(rows))
    with pytest.raises(InvalidInput, match=r"annotations\.json:1: generator_2: missing field"):
        _import(factory, [path])


def test_command_line(cli_store: object, factory: sessionmaker[Session], tmp_path: Path) -> None:
    args = ["import", "alpaca-eval", str(HAND_WRITTEN.parent)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("alpaca-eval: 1 file(s); instances +7 (0 present)")
    assert "judgments +7 (0 present); scores +6 (0 present); derived labels +0" in result.stdout
    assert table_counts(factory)["instances"] == 7  # (and the factory empties the store after)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(cli, ["import", "alpaca-eval", str(empty)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {empty}: no annotations.json files in this folder (subfolders included)\n"
    )
