"""Arena-Hard-Auto judgments: counts, flips and judge summary against the raw games, refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.errors import InvalidInput
from app.ingest.arena_hard import import_arena_hard
from app.ingest.records import ImportSummary
from app.services.evidence.benchmarks import get_benchmark
from app.services.metrics.judge_summary import judge_summaries
from app.tables import Instance, Judgment
from tests.ingest.test_helpers import (
    FORMATS,
    SHARED_FORMATS,
    current_labels,
    read_jsonl,
    table_counts,
    write_jsonl,
)

EXCERPTS = FORMATS / "arena_hard"
SHARED = SHARED_FORMATS / "arena_hard"
SOURCES = [
    pytest.param(EXCERPTS, id="excerpts"),
    pytest.param(
        SHARED,
        id="shared",
        marks=pytest.mark.skipif(
            not SHARED.is_dir(), reason=f"{SHARED} is absent (the full files live outside git)"
        ),
    ),
]
# The raw verdicts as identities: games[0] shows the baseline (A) first, games[1] the model.
GAME_1 = {"A>>B": "A", "A>B": "A", "A=B": "tie", "B>A": "B", "B>>A": "B", None: "invalid"}
GAME_2 = {"A>>B": "B", "A>B": "B", "A=B": "tie", "B>A": "A", "B>>A": "A", None: "invalid"}
STRENGTH = {"A>>B": 100.0, "B>>A": 100.0, "A>B": 75.0, "B>A": 75.0, "A=B": 50.0, None: None}
BAGEL = EXCERPTS / "model_judgment" / "DeepSeek-R1-Distill-Llama-70B" / "bagel-8b-v1.0.jsonl"


def _import(factory: sessionmaker[Session], paths: list[Path], **kw: Any) -> ImportSummary:
    with transaction(factory) as session:
        return import_arena_hard(session, paths, **kw)


def _raw(root: Path) -> dict[str, dict[str, Any]]:
    """Every row of every file under ``root`` by item id, read with plain json."""
    out = {}
    for path in sorted(root.rglob("*.jsonl")):
        for r in read_jsonl(path):
            out[f"{r['question_id']}:gpt-4-0314|{r['model']}"] = r
    return out


@pytest.mark.parametrize("root", SOURCES)
def test_counts_flips_and_judge_summary_equal_the_raw_games(
    factory: sessionmaker[Session], root: Path
) -> None:
    summary = _import(factory, [root])
    raw = _raw(root)
    n_rows = sum(len(read_jsonl(p)) for p in root.rglob("*.jsonl"))
    assert summary.instances_added == len(raw) == n_rows
    assert summary.judgments_added == 2 * n_rows
    expected = {
        k: (GAME_1[r["games"][0]["score"]], GAME_2[r["games"][1]["score"]], r["judge"])
        for k, r in raw.items()
    }
    retained = {k: v for k, v in expected.items() if "invalid" not in v[:2]}
    assert summary.derived_labels == len(retained) < len(raw)  # null scores are not retained
    with factory() as session:
        bench = get_benchmark(session, "arena-hard")
        q = (
            select(Instance.external_id, Judgment.order, Judgment.choice, Judgment.confidence)
            .join(Judgment, Judgment.instance_id == Instance.id)
            .add_columns(Judgment.raw_output, Judgment.details)
            .where(Instance.benchmark_id == bench.id)
        )
        for ext, order, choice, confidence, output, details in session.execute(q):
            game = raw[ext]["games"][0 if order == "AB" else 1]
            assert choice == expected[ext][0 if order == "AB" else 1]
            assert confidence == STRENGTH[game["score"]]
            assert output == game["judgment"]
            assert details["score"] == game["score"]
        labels: dict[str, str | None] = {}
        for judge in {v[2] for v in expected.values()}:
            labels |= current_labels(session, bench.id, f"flip:arena_hard/{judge}")
        assert {k: v for k, v in labels.items() if v is not None} == {
            k: str(int(v[0] != v[1])) for k, v in retained.items()
        }
        summaries = {s.judge: s for s in judge_summaries(session, "arena-hard", resamples=50)}
    for judge in {v[2] for v in expected.values()}:
        mine = [v for v in expected.values() if v[2] == judge]
        kept = [v for v in mine if "invalid" not in v[:2]]
        s = summaries[f"arena_hard/{judge}"]
        assert (s.pairs, s.retained, s.flips) == (
            len(mine),
            len(kept),
            sum(a != b for a, b, _ in kept),
        )
        assert s.flip_rate == pytest.approx(s.flips / len(kept))


@pytest.mark.parametrize("root", SOURCES)
def test_a_second_import_changes_nothing(factory: sessionmaker[Session], root: Path) -> None:
    first = _import(factory, [root])
    before = table_counts(factory)
    again = _import(factory, [root])
    assert table_counts(factory) == before
    assert (again.added, again.derived_labels) == (0, 0)
    assert (again.instances_skipped, again.judgments_skipped) == (
        first.instances_added,
        first.judgments_added,
    )
    assert again.data_version == first.data_version


def test_items_are_keyed_on_the_row_model_and_hold_both_answers(
    factory: sessionmaker[Session],
) -> None:
    _import(factory, [BAGEL], baseline="gpt-4-0314")
    row = read_jsonl(BAGEL)[0]
    with factory() as session:
        item = session.scalar(select(Instance).where(Instance.group_key == row["question_id"]))
    assert item is not None
    assert item.external_id == f"{row['question_id']}:gpt-4-0314|jondurbin/bagel-8b-v1.0"
    p = item.payload
    assert (p["model_a"], p["model_b"]) == ("gpt-4-0314", "jondurbin/bagel-8b-v1.0")
    first = row["games"][0]["user_prompt"]
    assert first == (
        f"<|User Prompt|>\n{p['prompt']}\n\n<|The Start of Assistant A's Answer|>\n"
        f"{p['response_a']}\n<|The End of Assistant A's Answer|>\n\n<|The Start of Assistant "
        f"B's Answer|>\n{p['response_b']}\n<|The End of Assistant B's Answer|>"
    )


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (
            lambda r: r["games"][1].update(score="A>>>B"),
            "games[1].score",
            "expected one of A>>B, A>B, A=B, B>A, B>>A or null, got 'A>>>B'",
        ),
        (
            lambda r: r["games"].pop(),
            "games",
            "expected a list of two games (baseline first, then swapped)",
        ),
        (lambda r: r["games"][0].pop("judgment"), "games[0].judgment", "missing field"),
        (
            lambda r: r["games"][0].update(user_prompt="Which answer is better?"),
            "games[0].user_prompt",
            "does not follow Arena-Hard's judge prompt ('<|User Prompt|>' ... '<|The End of "
            "Assistant B's Answer|>'), so the question and answers cannot be read from it",
        ),
        (
            lambda r: r["games"][1].update(user_prompt=r["games"][0]["user_prompt"]),
            "games[1].user_prompt",
            "does not show games[0]'s question and answers with the answers swapped",
        ),
    ],
)
def test_bad_rows_are_refused_with_their_line(
    factory: sessionmaker[Session], tmp_path: Path, change: Any, field: str, reason: str
) -> None:
    _import(factory, [BAGEL])
    before = table_counts(factory)
    rows = read_jsonl(BAGEL)
    rows.append({**json.loads(json.dumps(rows[1])), "question_id": "new-question"})
    change(rows[-1])
    path = write_jsonl(tmp_path / "bagel.jsonl", rows)
    with pytest.raises(InvalidInput) as info:
        _import(factory, [path])
    assert str(info.value) == f"{path}:{len(rows)}: {field}: {reason}"
    assert table_counts(factory) == before


def test_command_line_with_another_baseline(
    cli_store: object, factory: sessionmaker[Session]
) -> None:
    args = ["import", "arena-hard", str(EXCERPTS), "--baseline", "base-x", "-b", "ah"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ah: 3 file(s); instances +10 (0 present)")
    assert "judgments +20 (0 present)" in result.stdout
    with factory() as session:
        models = set(session.scalars(select(Instance.payload["model_a"].as_string())))
    assert models == {"base-x"}
    again = CliRunner().invoke(cli, args)
    assert (
        "instances +0 (10 present)" in again.stdout and "judgments +0 (20 present)" in again.stdout
    )
