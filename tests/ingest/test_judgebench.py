"""JudgeBench import on the bundled real data: pairs, o1-mini judgments, flips, reward scores."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import Conflict
from app.ingest.judgebench import import_judgebench
from app.services.evidence.benchmarks import get_benchmark
from app.tables import Detector, ImportRecord, Instance, Judgment, Score
from tests.ingest.test_helpers import (
    O1_MINI,
    O1_MINI_JUDGE,
    PAIRS,
    PAIRS_GPT4O,
    REWARD_OUTPUTS,
    current_labels,
    read_jsonl,
    table_counts,
    write_jsonl,
)

MIRROR = {"A>B": "B>A", "B>A": "A>B", "A=B": "A=B", None: None}
IDENTITY = {"A>B": "A", "B>A": "B", "A=B": "tie", None: None}


def _expected_flips(path: Path) -> dict[str, str | None]:
    """The flip rule of SOURCE.md, straight from the raw file: mirror the BA decision."""
    out: dict[str, str | None] = {}
    for row in read_jsonl(path):
        first, second = (j["decision"] for j in row["judgments"])
        c_ab, c_ba = IDENTITY[first], IDENTITY[MIRROR[second]]
        out[row["pair_id"]] = None if c_ab is None or c_ba is None else str(int(c_ab != c_ba))
    return out


def _import(factory: sessionmaker[Session], pairs=PAIRS, outputs=(O1_MINI,), **kw):
    with transaction(factory) as session:
        return import_judgebench(session, pairs, outputs=list(outputs), **kw)


def test_pairs_and_o1_mini_judgments(factory: sessionmaker[Session]) -> None:
    summary = _import(factory)
    assert summary.instances_added == 620
    assert summary.labels_added == 620
    assert summary.judgments_added == 700
    assert summary.derived_labels == 350
    with factory() as session:
        bench = get_benchmark(session, "judgebench")
        assert bench.kind == "pairwise"
        assert bench.data_version == 1
        assert session.scalar(select(func.count()).select_from(Instance)) == 620
        judge = session.scalar(select(Detector).where(Detector.name == O1_MINI_JUDGE))
        assert judge is not None and judge.kind == "judge"
        flips = current_labels(session, bench.id, f"flip:{O1_MINI_JUDGE}")
    retained = {k: v for k, v in flips.items() if v is not None}
    assert len(retained) == 350
    expected = _expected_flips(O1_MINI)
    assert {k: v for k, v in expected.items() if v is not None} == retained
    # Derived from the raw file above; the count of real position flips.
    assert sum(v == "1" for v in expected.values()) == 110


def test_judgments_are_identities_with_the_raw_output(factory: sessionmaker[Session]) -> None:
    _import(factory)
    raw = {r["pair_id"]: r["judgments"] for r in read_jsonl(O1_MINI)}
    with factory() as session:
        rows = session.execute(
            select(Instance.external_id, Judgment.order, Judgment.choice, Judgment.raw_output)
            .join(Judgment, Judgment.instance_id == Instance.id)
            .add_columns(Judgment.details, Judgment.mode)
        ).all()
    assert len(rows) == 700
    for pair_id, order, choice, output, details, mode in rows:
        entry = raw[pair_id][0 if order == "AB" else 1]
        decision = entry["decision"] if order == "AB" else MIRROR[entry["decision"]]
        assert choice == (IDENTITY[decision] or "invalid")
        assert output == entry["judgment"]["response"]
        assert details["decision"] == entry["decision"]  # the slot decision, unmirrored
        assert details["judge_model"] == "o1-mini-2024-09-12"
        assert mode == "imported"


def test_reference_labels_groups_and_payload(factory: sessionmaker[Session]) -> None:
    _import(factory, outputs=())
    rows = [r for p in PAIRS for r in read_jsonl(p)]
    with factory() as session:
        bench = get_benchmark(session, "judgebench")
        labels = current_labels(session, bench.id, "reference")
        stored = {i.external_id: i for i in session.scalars(select(Instance)).all()}
    assert labels == {r["pair_id"]: r["label"][0] for r in rows}
    for r in rows:
        inst = stored[r["pair_id"]]
        assert inst.payload == {
            "prompt": r["question"],
            "response_a": r["response_A"],
            "response_b": r["response_B"],
            "source": r["source"],
            "response_model": r["response_model"],
        }
        if r["original_id"] is not None:
            assert inst.group_key == str(r["original_id"])
        else:
            digest = hashlib.sha256(r["question"].encode()).hexdigest()[:16]
            assert inst.group_key == f"question:{digest}"
    # Both response models' pairs of one LiveBench question share its group.
    by_question: dict[str, set[str]] = {}
    for r in rows:
        if r["original_id"] is None:
            by_question.setdefault(r["question"], set()).add(stored[r["pair_id"]].group_key)
    assert len(by_question) == 264
    assert all(len(groups) == 1 for groups in by_question.values())
    assert len({i.group_key for i in stored.values()}) == 529


def test_reward_model_scores(factory: sessionmaker[Session]) -> None:
    summary = _import(factory, outputs=REWARD_OUTPUTS)
    assert summary.scores_added == 3 * 350
    for path in REWARD_OUTPUTS:
        expected = {}
        for row in read_jsonl(path):
            ab, ba = (j["judgment"]["scores"] for j in row["judgments"])
            # BA shows response B in slot A: identity rewards are the swapped slot rewards.
            p_ab = 1 / (1 + math.exp(-(ab[0] - ab[1])))
            p_ba = 1 / (1 + math.exp(-(ba[1] - ba[0])))
            expected[row["pair_id"]] = (p_ab + p_ba) / 2
        name = "reward_model/" + path.stem.split("judge_model=")[1]
        with factory() as session:
            detector = session.scalar(select(Detector).where(Detector.name == name))
            assert detector is not None and detector.kind == "reward_model"
            got = {
                external_id: score
                for external_id, score in session.execute(
                    select(Instance.external_id, Score.score)
                    .join(Score, Score.instance_id == Instance.id)
                    .where(Score.detector_id == detector.id)
                )
            }
            details = session.scalars(
                select(Judgment.details).where(Judgment.detector_id == detector.id)
            ).all()
        assert len(got) == 350
        assert all(0.0 <= s <= 1.0 for s in got.values())
        assert got == pytest.approx(expected, abs=1e-12)
        assert all(len(d["scores"]) == 2 for d in details)
    # Scores say something: on average they prefer the objectively correct response.
    labels = {r["pair_id"]: r["label"] for r in read_jsonl(PAIRS_GPT4O)}
    agree = [(expected[k] > 0.5) == (labels[k] == "A>B") for k in expected]
    assert sum(agree) / len(agree) > 0.5


def test_reimport_is_idempotent(factory: sessionmaker[Session]) -> None:
    _import(factory, outputs=[O1_MINI, *REWARD_OUTPUTS])
    before = table_counts(factory)
    summary = _import(factory, outputs=[O1_MINI, *REWARD_OUTPUTS])
    assert before == table_counts(factory)
    assert summary.added == 0 and summary.derived_labels == 0
    assert summary.instances_skipped == 620 + 4 * 350
    assert summary.judgments_skipped == 8 * 350
    assert summary.scores_skipped == 3 * 350
    with factory() as session:
        assert get_benchmark(session, "judgebench").data_version == 1
        assert session.scalar(select(func.count()).select_from(ImportRecord)) == 6


def test_outputs_alone_bring_their_pairs(factory: sessionmaker[Session]) -> None:
    summary = _import(factory, pairs=[], outputs=[O1_MINI])
    assert summary.instances_added == 350
    assert summary.labels_added == 350
    # Then the pairs file: its 350 GPT-4o pairs are already there and identical.
    summary = _import(factory, pairs=[PAIRS_GPT4O], outputs=[])
    assert (summary.instances_added, summary.instances_skipped) == (0, 350)


@pytest.mark.parametrize(
    ("edit", "field", "reason"),
    [
        (lambda r: r.update(response_A=r["response_A"] + " (edited)"), "response_A", "response_a"),
        (lambda r: r.update(label="B>A" if r["label"] == "A>B" else "A>B"), "label", "label"),
        (lambda r: r.update(source="elsewhere"), "source", "source"),
    ],
)
def test_conflicting_pairs_reimport_is_refused(
    factory: sessionmaker[Session], tmp_path: Path, edit, field: str, reason: str
) -> None:
    _import(factory, pairs=[PAIRS_GPT4O], outputs=())
    rows = read_jsonl(PAIRS_GPT4O)
    edit(rows[6])
    changed = write_jsonl(tmp_path / PAIRS_GPT4O.name, rows)
    before = table_counts(factory)
    with pytest.raises(Conflict) as err:
        _import(factory, pairs=[changed], outputs=())
    assert str(err.value).startswith(f"{changed}:7: {field}: ")
    assert reason in str(err.value)
    assert rows[6]["pair_id"] in str(err.value)
    assert table_counts(factory) == before


def test_conflicting_judgment_reimport_is_refused(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    _import(factory)
    rows = read_jsonl(O1_MINI)
    second = rows[11]["judgments"][1]
    second["decision"] = "A>B" if second["decision"] != "A>B" else "B>A"
    changed = write_jsonl(tmp_path / O1_MINI.name, rows)
    before = table_counts(factory)
    with pytest.raises(Conflict) as err:
        _import(factory, pairs=[], outputs=[changed])
    assert str(err.value).startswith(f"{changed}:12: judgments[1]: the BA judgment of ")
    assert table_counts(factory) == before


def test_conflicting_reward_score_is_refused(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    path = REWARD_OUTPUTS[0]
    _import(factory, pairs=[], outputs=[path])
    rows = read_jsonl(path)
    rows[2]["judgments"][0]["judgment"]["scores"][0] += 1.5
    changed = write_jsonl(tmp_path / path.name, rows)
    before = table_counts(factory)
    with pytest.raises(Conflict) as err:
        _import(factory, pairs=[], outputs=[changed])
    # The judgment's details (its rewards) differ first; either way line 3 is named.
    assert str(err.value).startswith(f"{changed}:3: judgments[")
    assert table_counts(factory) == before


def test_judge_name_falls_back_to_the_rows(factory: sessionmaker[Session], tmp_path: Path) -> None:
    renamed = write_jsonl(tmp_path / "o1.jsonl", read_jsonl(O1_MINI)[:20])
    summary = _import(factory, pairs=[], outputs=[renamed])
    assert summary.judgments_added == 40
    with factory() as session:
        names = session.scalars(select(Detector.name)).all()
    assert names == ["arena_hard/o1-mini-2024-09-12"]
