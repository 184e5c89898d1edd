"""FastChat MT-Bench judgments: counts against the raw files, flips, joins, refusals."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import Conflict, InvalidInput
from app.ingest.judge_prompts import FASTCHAT_PAIR, FASTCHAT_SINGLE
from app.ingest.mtbench import import_mtbench
from app.ingest.mtbench_judgments import import_mtbench_judgments
from app.ingest.records import ImportSummary
from app.services.evidence.benchmarks import get_benchmark
from app.services.metrics.judge_summary import judge_summaries
from app.tables import Detector, Instance, Judgment, Score
from tests.conftest import DATA
from tests.ingest.test_helpers import (
    FORMATS,
    SHARED_FORMATS,
    current_labels,
    read_jsonl,
    table_counts,
    write_jsonl,
)

EXCERPTS = FORMATS / "mt_bench"
SHARED = SHARED_FORMATS / "mt_bench"
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
IDENTITY = {"model_1": "A", "model_2": "B", "tie": "tie", "error": "invalid"}
QUESTIONS = DATA / "mt-bench" / "question.jsonl"
ANSWERS = DATA / "mt-bench" / "model_answer"


def _files(root: Path, kind: str) -> list[Path]:
    return sorted(root.rglob(f"*_{kind}.jsonl"))


def _import(factory: sessionmaker[Session], paths: list[Path], **kw: Any) -> list[ImportSummary]:
    with transaction(factory) as session:
        return import_mtbench_judgments(session, paths, **kw)


def _raw_pairs(paths: list[Path]) -> dict[str, tuple[str, str, str]]:
    """``{item id: (g1 identity, g2 identity, judge)}`` straight from the files (A = model_1)."""
    out = {}
    for path in paths:
        for r in read_jsonl(path):
            ext = f"{r['question_id']}:{r['model_1']}|{r['model_2']}"
            ext += "" if r["turn"] == 1 else f":turn{r['turn']}"
            out[ext] = (IDENTITY[r["g1_winner"]], IDENTITY[r["g2_winner"]], r["judge"][0])
    return out


def _stored_orders(session: Session, bench: str) -> dict[str, dict[str, str]]:
    q = (
        select(Instance.external_id, Judgment.order, Judgment.choice)
        .join(Judgment, Judgment.instance_id == Instance.id)
        .where(Instance.benchmark_id == get_benchmark(session, bench).id)
    )
    out: dict[str, dict[str, str]] = {}
    for ext, order, choice in session.execute(q):
        out.setdefault(ext, {})[order] = choice
    return out


@pytest.mark.parametrize("root", SOURCES)
def test_counts_flips_and_judge_summary_equal_the_raw_files(
    factory: sessionmaker[Session], root: Path
) -> None:
    pairs, singles = _files(root, "pair"), _files(root, "single")
    pair_summary, single_summary = _import(factory, [*pairs, *singles])
    raw = _raw_pairs(pairs)
    n_rows = sum(len(read_jsonl(p)) for p in pairs)
    assert pair_summary.instances_added == len(raw) == n_rows
    assert pair_summary.judgments_added == 2 * n_rows
    retained = {k: v for k, v in raw.items() if "invalid" not in v[:2]}
    flips = {k: str(int(v[0] != v[1])) for k, v in retained.items()}
    with factory() as session:
        stored = _stored_orders(session, "mt-bench")
        assert stored == {k: {"AB": v[0], "BA": v[1]} for k, v in raw.items()}
        bench = get_benchmark(session, "mt-bench")
        labels: dict[str, str | None] = {}
        for judge in {v[2] for v in raw.values()}:
            labels |= current_labels(session, bench.id, f"flip:fastchat_pair/{judge}")
        assert {k: v for k, v in labels.items() if v is not None} == flips
        assert pair_summary.derived_labels == len(flips)
        summaries = {s.judge: s for s in judge_summaries(session, "mt-bench", resamples=50)}
        for judge in {v[2] for v in raw.values()}:
            mine = {k: v for k, v in raw.items() if v[2] == judge}
            kept = [v for v in mine.values() if "invalid" not in v[:2]]
            s = summaries[f"fastchat_pair/{judge}"]
            assert (s.pairs, s.retained) == (len(mine), len(kept))
            assert s.flips == sum(g1 != g2 for g1, g2, _ in kept)
            assert s.flip_rate == pytest.approx(s.flips / len(kept))
    grades = [r["score"] for p in singles for r in read_jsonl(p)]
    assert single_summary.benchmark == "mt-bench-single"
    assert single_summary.instances_added == len(grades)
    assert single_summary.scores_added == sum(g != -1 for g in grades)
    assert single_summary.ignored == sum(g == -1 for g in grades)
    with factory() as session:
        stored_grades = session.scalars(
            select(Score.score)
            .join(Detector, Detector.id == Score.detector_id)
            .where(Detector.name.startswith("fastchat_single/"))
        ).all()
    assert Counter(stored_grades) == Counter(float(g) for g in grades if g != -1)


@pytest.mark.parametrize("root", SOURCES)
def test_a_second_import_changes_nothing(factory: sessionmaker[Session], root: Path) -> None:
    paths = sorted(root.rglob("*.jsonl"))
    first = _import(factory, paths)
    before = table_counts(factory)
    again = _import(factory, paths)
    assert table_counts(factory) == before
    for a, b in zip(first, again, strict=True):
        assert b.added == 0 and b.derived_labels == 0
        assert b.instances_skipped == a.instances_added
        assert b.judgments_skipped == a.judgments_added
        assert b.scores_skipped == a.scores_added
        assert b.data_version == a.data_version
        assert "instances +0" in b.line()


def test_payloads_are_the_texts_the_judge_saw(factory: sessionmaker[Session]) -> None:
    turbo = EXCERPTS / "model_judgment" / "gpt-4-turbo_pair.jsonl"
    _import(factory, [turbo])
    with factory() as session:
        items = {
            i.external_id: i
            for i in session.scalars(select(Instance).where(Instance.group_key == "136"))
        }
    for r in read_jsonl(turbo):
        if r["question_id"] != 136:
            continue
        suffix = "" if r["turn"] == 1 else ":turn2"
        item = items[f"136:{r['model_1']}|{r['model_2']}{suffix}"]
        p = item.payload
        assert (p["model_a"], p["model_b"]) == (r["model_1"], r["model_2"])
        # Rebuilding the judge's two prompts from the payload gives the file's prompts back.
        template = FASTCHAT_PAIR[r["judge"][1]].template
        if r["turn"] == 1:
            values = {"question": p["prompt"], "answer_a": p["response_a"]}
            values["answer_b"] = p["response_b"]
            swapped = {**values, "answer_a": p["response_b"], "answer_b": p["response_a"]}
        else:
            assert p["turn"] == 2
            values = {
                "question_1": p["turn1_prompt"],
                "question_2": p["prompt"],
                "answer_a_1": p["turn1_response_a"],
                "answer_a_2": p["response_a"],
                "answer_b_1": p["turn1_response_b"],
                "answer_b_2": p["response_b"],
            }
            swapped = {k.replace("_a_", "_x_"): v for k, v in values.items()}
            swapped = {k.replace("_b_", "_a_"): v for k, v in swapped.items()}
            swapped = {k.replace("_x_", "_b_"): v for k, v in swapped.items()}
        assert template.format(**values) == r["g1_user_prompt"]
        assert template.format(**swapped) == r["g2_user_prompt"]


def test_templates_are_fastchat_judge_prompts() -> None:
    rows = read_jsonl(DATA / "mt-bench" / "judge_prompts.jsonl")
    published = {r["name"]: r["prompt_template"] for r in rows}
    ours = {**FASTCHAT_PAIR, **FASTCHAT_SINGLE}
    assert {name: t.template for name, t in ours.items()} == published


def _games(models: tuple[str, str], qid: int, turn: int, g1: str, g2: str) -> dict[str, Any]:
    """A pair row whose prompts the importer does not read (texts come from the answer files)."""
    return {
        "question_id": qid,
        "model_1": models[0],
        "model_2": models[1],
        "g1_winner": g1,
        "g2_winner": g2,
        "judge": ["gpt-4", "pair-v2" if turn == 1 else "pair-v2-multi-turn"],
        "g1_user_prompt": "(shown)",
        "g1_judgment": f"g1 says [[{g1}]]",
        "g2_user_prompt": "(shown)",
        "g2_judgment": f"g2 says [[{g2}]]",
        "turn": turn,
        "tstamp": 1.5,
    }


@pytest.mark.parametrize("answers_first", [True, False])
def test_joins_the_answers_importer_items(
    factory: sessionmaker[Session], tmp_path: Path, answers_first: bool
) -> None:
    models = ("gpt-4", "claude-v1")
    rows = [
        _games(models, 81, 1, "model_1", "model_2"),
        _games(models, 81, 2, "model_2", "model_2"),
        _games(models, 82, 1, "tie", "error"),
    ]
    path = write_jsonl(tmp_path / "gpt-4_pair.jsonl", rows)

    def answers() -> ImportSummary:
        with transaction(factory) as session:
            return import_mtbench(session, QUESTIONS, ANSWERS, models=list(models))

    def judgments() -> ImportSummary:
        return _import(factory, [path], questions=QUESTIONS, answers=ANSWERS)[0]

    if answers_first:
        assert answers().instances_added == 80
        joined = judgments()
        assert (joined.instances_added, joined.instances_skipped) == (1, 2)  # turn 2 is new
    else:
        assert judgments().instances_added == 3
        joined = answers()
        assert (joined.instances_added, joined.instances_skipped) == (78, 2)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(Instance)) == 81
        item = session.scalar(select(Instance).where(Instance.external_id == "81:gpt-4|claude-v1"))
        assert item is not None and item.payload["category"] == "writing"
        turn2 = session.scalar(
            select(Instance).where(Instance.external_id == "81:gpt-4|claude-v1:turn2")
        )
        assert turn2 is not None
        question = next(r for r in read_jsonl(QUESTIONS) if r["question_id"] == 81)
        assert turn2.payload["prompt"] == question["turns"][1]
        assert turn2.payload["turn1_prompt"] == item.payload["prompt"]
        assert turn2.payload["turn1_response_a"] == item.payload["response_a"]
        assert _stored_orders(session, "mt-bench") == {
            "81:gpt-4|claude-v1": {"AB": "A", "BA": "B"},
            "81:gpt-4|claude-v1:turn2": {"AB": "B", "BA": "B"},
            "82:gpt-4|claude-v1": {"AB": "tie", "BA": "invalid"},
        }


def test_a_pair_held_the_other_way_round_gets_mirrored_games(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    with transaction(factory) as session:
        import_mtbench(session, QUESTIONS, ANSWERS, models=["claude-v1", "gpt-4"])
    rows = [_games(("gpt-4", "claude-v1"), 81, 1, "model_1", "tie")]
    summary = _import(
        factory, [write_jsonl(tmp_path / "p.jsonl", rows)], questions=QUESTIONS, answers=ANSWERS
    )[0]
    assert summary.instances_added == 0
    with factory() as session:
        # g1 showed gpt-4 (the item's B) first: it is the BA game, and its winner is B.
        assert _stored_orders(session, "mt-bench") == {
            "81:claude-v1|gpt-4": {"BA": "B", "AB": "tie"}
        }
        details = session.scalars(select(Judgment.details).order_by(Judgment.order)).all()
    assert [d["game"] for d in details] == ["g2", "g1"]


def test_single_grades_of_minus_one_are_no_score(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    rows = read_jsonl(EXCERPTS / "model_judgment" / "gpt-4_single.jsonl")
    rows[0]["score"] = -1
    summary = _import(factory, [write_jsonl(tmp_path / "gpt-4_single.jsonl", rows)])[0]
    assert (summary.instances_added, summary.scores_added, summary.ignored) == (4, 3, 1)
    assert "1 ignored" in summary.line()
    with factory() as session:
        item = session.scalar(select(Instance).where(Instance.external_id == "81:phi-3-dpo:turn2"))
        assert item is not None
        assert item.payload["turn"] == 2 and item.payload["turn1_question"].startswith("Compose")
        score = session.scalar(select(Score).where(Score.instance_id == item.id))
        assert score is not None and score.details["judgment"] == rows[2]["judgment"]


def _refused(
    factory: sessionmaker[Session], path: Path, error: type[Exception], expected: str
) -> None:
    before = table_counts(factory)
    with pytest.raises(error) as info:
        _import(factory, [path])
    assert str(info.value) == expected
    assert table_counts(factory) == before


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"g2_winner": "model_3"}, "g2_winner", "expected one of model_1, model_2, tie, error, got 'model_3'"),  # noqa: E501
        ({"turn": 3}, "turn", "expected 1 or 2, got 3"),
        ({"judge": "gpt-4"}, "judge", "expected a list of 2 non-empty strings, got 'gpt-4'"),
        ({"g1_user_prompt": "Which is better?"}, "g1_user_prompt", "does not follow FastChat's 'pair-v2' prompt, so the question and answers cannot be read from it; give --questions and --answers to take them from FastChat's files"),  # noqa: E501
    ],
)  # fmt: skip
def test_bad_rows_are_refused_with_their_line(
    factory: sessionmaker[Session],
    tmp_path: Path,
    change: dict[str, Any],
    field: str,
    reason: str,
) -> None:
    _import(factory, [EXCERPTS / "model_judgment" / "gpt-4_pair.jsonl"])
    rows = read_jsonl(EXCERPTS / "model_judgment" / "gpt-4_pair.jsonl")
    rows.append({**rows[0], "question_id": 999, **change})
    path = write_jsonl(tmp_path / "gpt-4_pair.jsonl", rows)
    _refused(factory, path, InvalidInput, f"{path}:{len(rows)}: {field}: {reason}")


def test_swapped_game_with_other_texts_is_refused(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    rows = read_jsonl(EXCERPTS / "model_judgment" / "gpt-4_pair.jsonl")[:2]
    rows[1]["g2_user_prompt"] = rows[1]["g1_user_prompt"]  # not swapped
    path = write_jsonl(tmp_path / "x_pair.jsonl", rows)
    _refused(
        factory,
        path,
        InvalidInput,
        f"{path}:2: g2_user_prompt: does not show g1's question and answers with the answers "
        "swapped (as FastChat's 'pair-v2' prompt lays them out)",
    )


def test_a_changed_verdict_is_a_conflict(factory: sessionmaker[Session], tmp_path: Path) -> None:
    source = EXCERPTS / "model_judgment" / "gpt-4_pair.jsonl"
    _import(factory, [source])
    rows = read_jsonl(source)
    assert rows[1]["g1_winner"] == "model_2"
    rows[1]["g1_winner"] = "tie"
    path = write_jsonl(tmp_path / "gpt-4_pair.jsonl", rows)
    ext = f"88:{rows[1]['model_1']}|{rows[1]['model_2']}"
    _refused(
        factory,
        path,
        Conflict,
        f"{path}:2: g1_winner: the AB judgment of {ext!r} is stored with choice 'B', "
        "the file says 'tie'",
    )


def test_not_a_judgment_file_and_half_of_the_sources(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "question.jsonl", read_jsonl(QUESTIONS)[:2])
    _refused(
        factory,
        path,
        InvalidInput,
        f"{path}:1: g1_winner: neither a pair judgment (g1_winner) nor a single grade (score): "
        "not a FastChat model_judgment file",
    )
    with pytest.raises(InvalidInput, match="give --questions and --answers together"):
        _import(factory, [path], questions=QUESTIONS)


def test_command_line(cli_store: object, factory: sessionmaker[Session], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from app.cli import cli

    args = ["import", "mtbench-judgments", str(EXCERPTS), "-b", "mtb"]  # searched recursively
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("mtb: 2 file(s); instances +15 (0 present)")
    assert "judgments +30 (0 present)" in lines[0]
    assert lines[1].startswith("mtb-single: 1 file(s); instances +4 (0 present)")
    bad = tmp_path / "bad_pair.jsonl"
    bad.write_text(json.dumps({"question_id": 1}) + "\n")
    result = CliRunner().invoke(cli, ["import", "mtbench-judgments", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:1: g1_winner: neither a pair judgment" in result.stderr
