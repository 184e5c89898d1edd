"""MT-Bench pairs and true/false statement sets from the bundled data."""

from __future__ import annotations

import csv
import itertools
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.mtbench import available_models, import_mtbench
from app.ingest.statements import import_statements
from app.services.evidence.benchmarks import get_benchmark
from app.tables import ImportRecord, Instance, LabelEvent
from tests.conftest import DATA
from tests.ingest.test_helpers import current_labels, read_jsonl, table_counts

MT = DATA / "mt-bench"
QUESTIONS = MT / "question.jsonl"
ANSWERS = MT / "model_answer"
TRUTH = DATA / "truth"


def _answers(model: str) -> dict[int, str]:
    return {
        r["question_id"]: r["choices"][0]["turns"][0]
        for r in read_jsonl(ANSWERS / f"{model}.jsonl")
    }


def test_mtbench_all_unordered_pairs(factory: sessionmaker[Session]) -> None:
    models = ["gpt-4", "claude-v1", "vicuna-13b-v1.3"]
    with transaction(factory) as session:
        summary = import_mtbench(session, QUESTIONS, ANSWERS, models=models)
    assert summary.instances_added == 80 * 3
    assert summary.labels_added == 0 and summary.data_version == 0
    questions = {q["question_id"]: q for q in read_jsonl(QUESTIONS)}
    answers = {m: _answers(m) for m in models}
    with factory() as session:
        bench = get_benchmark(session, "mt-bench")
        instances = {i.external_id: i for i in session.scalars(select(Instance))}
        record = session.scalar(select(ImportRecord))
    assert bench.kind == "pairwise"
    assert record is not None and record.counts["models"] == models
    assert len(instances) == 240
    for qid, (a, b) in itertools.product(questions, itertools.combinations(models, 2)):
        inst = instances[f"{qid}:{a}|{b}"]
        assert inst.group_key == str(qid)
        assert inst.payload == {
            "prompt": questions[qid]["turns"][0],
            "response_a": answers[a][qid],
            "response_b": answers[b][qid],
            "category": questions[qid]["category"],
            "model_a": a,
            "model_b": b,
        }
    # Again: nothing new.
    with transaction(factory) as session:
        again = import_mtbench(session, QUESTIONS, ANSWERS, models=models)
    assert again.added == 0 and again.instances_skipped == 240


def test_mtbench_default_models_and_missing_answers(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    first, second = available_models(ANSWERS)[:2]
    answers = tmp_path / "answers"
    answers.mkdir()
    shutil.copy(ANSWERS / f"{first}.jsonl", answers)
    rows = read_jsonl(ANSWERS / f"{second}.jsonl")
    (answers / f"{second}.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows if r["question_id"] != 81),
        encoding="utf-8",
    )
    with transaction(factory) as session:
        summary = import_mtbench(session, QUESTIONS, answers)
    assert (summary.instances_added, summary.ignored) == (79, 1)
    with factory() as session:
        ids = set(session.scalars(select(Instance.external_id)))
    assert f"82:{first}|{second}" in ids and f"81:{first}|{second}" not in ids


def test_statements_cities_grouped_by_city(factory: sessionmaker[Session]) -> None:
    path = TRUTH / "cities.csv"
    with transaction(factory) as session:
        summary = import_statements(session, path)
    with path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert summary.benchmark == "cities"
    assert (summary.instances_added, summary.labels_added) == (len(rows), len(rows)) == (1496, 1496)
    with factory() as session:
        bench = get_benchmark(session, "cities")
        first = session.scalar(select(Instance).where(Instance.external_id == "cities:1"))
        groups = session.scalar(
            select(func.count(func.distinct(Instance.group_key))).where(
                Instance.benchmark_id == bench.id
            )
        )
        truth = current_labels(session, bench.id, "truth")
    assert bench.kind == "statement"
    assert first is not None
    assert first.payload == {
        "statement": rows[0]["statement"],
        "dataset": "cities",
        "city": rows[0]["city"],
        "country": rows[0]["country"],
        "correct_country": rows[0]["correct_country"],
    }
    assert first.group_key == rows[0]["city"]
    assert groups == len({r["city"] for r in rows})
    assert truth == {f"cities:{i}": r["label"] for i, r in enumerate(rows, 1)}


def test_statements_several_files_share_a_benchmark(factory: sessionmaker[Session]) -> None:
    files = [TRUTH / "cities.csv", TRUTH / "neg_cities.csv", TRUTH / "facts.csv"]
    with transaction(factory) as session:
        for path in files:
            import_statements(session, path, benchmark="truth")
    with factory() as session:
        bench = get_benchmark(session, "truth")
        by_dataset = Counter(
            p["dataset"]
            for p in session.scalars(
                select(Instance.payload).where(Instance.benchmark_id == bench.id)
            )
        )
        krasnodar = session.scalars(
            select(Instance.payload["dataset"].as_string()).where(Instance.group_key == "Krasnodar")
        ).all()
    assert by_dataset == {"cities": 1496, "neg_cities": 1496, "facts": 561}
    # Affirmative and negated statements about one city share its group.
    assert sorted(set(krasnodar)) == ["cities", "neg_cities"]
    assert bench.data_version == 3
    # facts.csv repeats statements: ids are row numbers, so nothing collides.
    assert table_counts(factory)["instances"] == 1496 * 2 + 561


@pytest.mark.parametrize(
    ("name", "labelled", "values"),
    [
        ("all_unambiguous_replies.csv", 104, {"0", "1"}),  # written as 1.0 / 0.0
        ("other.csv", 0, set()),  # no labels at all: instances only
    ],
)
def test_statements_float_and_empty_labels(
    factory: sessionmaker[Session], name: str, labelled: int, values: set[str]
) -> None:
    path = TRUTH / "real_world_scenarios" / name
    with transaction(factory) as session:
        summary = import_statements(session, path)
    assert summary.labels_added == labelled
    with factory() as session:
        stored = set(session.scalars(select(LabelEvent.value).distinct()))
        bench = get_benchmark(session, path.stem)
    assert stored == values
    assert bench.data_version == (1 if labelled else 0)
