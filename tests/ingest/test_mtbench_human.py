"""MT-Bench human judgments: one vote per annotator, joined with FastChat's judges, and refusals.

The excerpt is hand-written in the dataset's schema (tests/ingest/formats/mt_bench_human/NOTE.md);
every expectation below is recomputed from its rows and the judges' files here, independently of
the importers.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import cohen_kappa_score
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import Conflict, InvalidInput
from app.ingest.mtbench_human import import_mtbench_human
from app.ingest.mtbench_judgments import import_mtbench_judgments
from app.ingest.records import ImportSummary
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.resolution import resolved_values
from app.services.review.judge_people import judges_vs_people
from app.tables import Instance, LabelEvent
from tests.ingest.test_helpers import FORMATS, read_jsonl, table_counts, write_jsonl

HUMAN = FORMATS / "mt_bench_human" / "human_judgments.jsonl"
JUDGMENTS = sorted((FORMATS / "mt_bench" / "model_judgment").glob("*_pair.jsonl"))
WINNER = {"model_a": "A", "model_b": "B", "tie": "tie", "tie (bothbad)": "tie"}
FLIP = {"A": "B", "B": "A", "tie": "tie"}
GAME = {"model_1": "A", "model_2": "B", "tie": "tie", "error": None}


def _human(factory: sessionmaker[Session], path: Path, **kw: Any) -> ImportSummary:
    with transaction(factory) as session:
        return import_mtbench_human(session, [path], **kw)


def _ext(qid: int, a: str, b: str, turn: int) -> str:
    return f"{qid}:{a}|{b}" + ("" if turn == 1 else f":turn{turn}")


def _expected_votes(rows: list[dict[str, Any]], held: set[str]) -> dict[tuple[str, str], str]:
    """``{(item id, annotator): vote}``: items keep a stored orientation, else the first row's."""
    oriented: dict[tuple[int, frozenset[str]], tuple[str, str]] = {}
    out = {}
    for r in rows:
        q, a, b = r["question_id"], r["model_a"], r["model_b"]
        key = (q, frozenset((a, b)))
        if key not in oriented:
            stored = [
                (x, y) for x, y in ((a, b), (b, a)) if any(_ext(q, x, y, t) in held for t in (1, 2))
            ]
            oriented[key] = stored[0] if stored else (a, b)
        first, second = oriented[key]
        value = WINNER[r["winner"]]
        out[(_ext(q, first, second, r["turn"]), r["judge"])] = (
            value if (first, second) == (a, b) else FLIP[value]
        )
    return out


def _stored_votes(session: Session, label: str = "human") -> dict[tuple[str, str], str]:
    q = (
        select(Instance.external_id, LabelEvent.author, LabelEvent.value)
        .join(Instance, Instance.id == LabelEvent.instance_id)
        .where(LabelEvent.label_name == label, LabelEvent.source == "vote")
    )
    return {(ext, author): value for ext, author, value in session.execute(q)}


def test_votes_per_annotator_and_judges_against_people(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        import_mtbench_judgments(session, JUDGMENTS)
    with factory() as session:
        held = set(session.scalars(select(Instance.external_id)))
    rows = read_jsonl(HUMAN)
    expected = _expected_votes(rows, held)
    assert len(expected) == len(rows)  # every row is one annotator's vote on one item
    summary = _human(factory, HUMAN)
    items = {ext for ext, _ in expected}
    assert (summary.labels_added, summary.labels_skipped) == (len(rows), 0)
    assert summary.instances_added == len(items - held) == 3  # q81 both turns, q82
    assert summary.instances_skipped == len(items & held)
    per_item = Counter(ext for ext, _ in expected)
    assert max(per_item.values()) == 3 and {1, 2} <= set(per_item.values())
    with factory() as session:
        assert _stored_votes(session) == expected
        bench = get_benchmark(session, "mt-bench")
        # Resolution reads the votes as queue votes: unanimous ones resolve with k = 1.
        by_item: dict[str, set[str]] = {}
        for (ext, _), value in expected.items():
            by_item.setdefault(ext, set()).add(value)
        ids = dict(session.execute(select(Instance.external_id, Instance.id)).all())
        resolved = {e: v.pop() for e, v in by_item.items() if len(v) == 1}
        assert resolved_values(session, bench.id, "human", k=1) == {
            ids[e]: v for e, v in resolved.items()
        }
        turn2 = session.scalar(
            select(Instance).where(Instance.external_id == "81:gpt-4|claude-v1:turn2")
        )
        assert turn2 is not None
        answers = json.loads(
            (FORMATS.parents[2] / "data/mt-bench/model_answer/gpt-4.jsonl")
            .read_text()
            .splitlines()[0]
        )
        assert turn2.payload["response_a"] == answers["choices"][0]["turns"][1]
        result = judges_vs_people(session, bench, "human", k=1, resamples=0)
    # Each judge's folded verdict from its file against the people, by sklearn.
    verdicts: dict[str, dict[str, str]] = {}
    for path in JUDGMENTS:
        for r in read_jsonl(path):
            g1, g2 = GAME[r["g1_winner"]], GAME[r["g2_winner"]]
            if g1 is None or g2 is None:
                continue
            ext = _ext(r["question_id"], r["model_1"], r["model_2"], r["turn"])
            verdicts.setdefault(f"fastchat_pair/{r['judge'][0]}", {})[ext] = (
                g1 if g1 == g2 else "tie"
            )
    rows_by_judge = {j.judge: j for j in result.judges}
    assert set(rows_by_judge) == set(verdicts)
    for judge, mine in verdicts.items():
        shared = sorted(set(mine) & set(resolved))
        row = rows_by_judge[judge]
        assert row.n_items == len(shared) >= 3
        a, b = [mine[e] for e in shared], [resolved[e] for e in shared]
        assert row.kappa == pytest.approx(cohen_kappa_score(a, b))
        assert row.n_agree == sum(x == y for x, y in zip(a, b, strict=True))
    again = _human(factory, HUMAN)
    assert (again.labels_added, again.labels_skipped, again.instances_added) == (0, len(rows), 0)


def test_parquet_and_json_array_hold_the_same_votes(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    rows = read_jsonl(HUMAN)
    parquet = tmp_path / "human-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    array = tmp_path / "human_judgments.json"
    array.write_text(json.dumps(rows, indent=1))
    _human(factory, parquet, benchmark="from-parquet")
    _human(factory, array, benchmark="from-json")
    with factory() as session:
        by_bench: dict[str, Counter[tuple[str, str, str]]] = {}
        q = select(
            Instance.benchmark_id, Instance.external_id, LabelEvent.author, LabelEvent.value
        ).join(Instance, Instance.id == LabelEvent.instance_id)
        for bench_id, ext, author, value in session.execute(q):
            by_bench.setdefault(str(bench_id), Counter())[(ext, author, value)] += 1
    first, second = by_bench.values()
    assert first == second and sum(first.values()) == len(rows)
    assert {(e, a): v for e, a, v in first} == _expected_votes(rows, set())


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"winner": "model_c"}, "winner", "expected one of model_a, model_b, tie, tie (bothbad), got 'model_c'"),  # noqa: E501
        ({"turn": 3}, "turn", "expected 1 or 2, got 3"),
        ({"judge": ["gpt-4", "pair-v2"]}, "judge", "a model judge's row (['gpt-4', 'pair-v2']): import FastChat's pair judgments with `appellate import mtbench-judgments`"),  # noqa: E501
        ({"conversation_b": [{"role": "assistant", "content": "hi"}]}, "conversation_b[0]", "expected {'role': 'user', 'content': text} (user and assistant messages alternate), got {'role': 'assistant', 'content': 'hi'}"),  # noqa: E501
        ({"judge": "expert_0", "winner": "model_b", "question_id": 81}, "winner", "'expert_0' voted on '81:gpt-4|claude-v1' on line 27 too, with another winner ('model_a'); one annotator holds one vote per item"),  # noqa: E501
    ],
)  # fmt: skip
def test_bad_rows_are_refused_with_their_line(
    factory: sessionmaker[Session],
    tmp_path: Path,
    change: dict[str, Any],
    field: str,
    reason: str,
) -> None:
    rows = read_jsonl(HUMAN)
    rows.append({**rows[26], **change})  # line 27: expert_0 on 81, gpt-4 vs claude-v1
    path = write_jsonl(tmp_path / "human.jsonl", rows)
    before = table_counts(factory)
    with pytest.raises(InvalidInput) as info:
        _human(factory, path)
    assert str(info.value) == f"{path}:{len(rows)}: {field}: {reason}"
    assert table_counts(factory) == before


def test_a_changed_vote_is_a_conflict(factory: sessionmaker[Session], tmp_path: Path) -> None:
    _human(factory, HUMAN)
    rows = read_jsonl(HUMAN)
    assert (rows[0]["judge"], rows[0]["winner"]) == ("expert_0", "model_a")
    rows[0]["winner"] = "tie"
    path = write_jsonl(tmp_path / "human.jsonl", rows)
    before = table_counts(factory)
    with pytest.raises(Conflict) as info:
        _human(factory, path)
    assert str(info.value) == (
        f"{path}:1: winner: 'expert_0''s vote on '87:phi-3|phi-3-dpo' is stored as 'A', "
        "the file says 'tie'"
    )
    assert table_counts(factory) == before


def test_command_line(cli_store: object) -> None:
    from typer.testing import CliRunner

    from app.cli import cli

    result = CliRunner().invoke(cli, ["import", "mtbench-human", str(HUMAN), "-b", "mtb"])
    assert result.exit_code == 0, result.output
    line = result.stdout.splitlines()[0]
    votes = _expected_votes(read_jsonl(HUMAN), set())
    items = {ext for ext, _ in votes}
    assert line.startswith(f"mtb: 1 file(s); instances +{len(items)} (0 present)")
    assert f"labels +{len(votes)} (0 present)" in line


def test_the_upload_page_suggests_it_for_the_file() -> None:
    from app.web.upload_preview import preview
    from workers.jobs.import_upload import IMPORT

    assert preview(HUMAN).importer == "mtbench-human"
    assert "mtbench-human" in IMPORT
