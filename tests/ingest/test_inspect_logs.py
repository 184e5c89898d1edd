"""Inspect AI logs: every real log imports, counts equal a plain read of the files, refusals."""

from __future__ import annotations

import json
import sys
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.errors import InvalidInput
from app.ingest.inspect_logs import MissingPackage, import_inspect_logs
from app.ingest.records import ImportSummary
from app.services.evidence.benchmarks import get_benchmark
from app.tables import Detector, Instance, Prediction, Score
from tests.ingest.test_helpers import FORMATS, SHARED_FORMATS, current_labels, table_counts

pytest.importorskip("inspect_ai.log")

EXCERPTS = FORMATS / "inspect"
SHARED = SHARED_FORMATS / "inspect"
SOURCES = [
    pytest.param(EXCERPTS, id="copies"),
    pytest.param(
        SHARED,
        id="shared",
        marks=pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent"),
    ),
]
ARC = EXCERPTS / "eee-arc-two-models" / "tests" / "data" / "inspect"
QWEN = ARC / "data_arc_qwen.json"
LETTERS = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}


def _import(factory: sessionmaker[Session], paths: list[Path], **kw: Any) -> list[ImportSummary]:
    with transaction(factory) as session:
        return import_inspect_logs(session, paths, **kw)


def _raw_log(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(eval spec, samples) of a log read with plain json / zipfile, not with inspect_ai."""
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        return data["eval"], data.get("samples") or []
    with zipfile.ZipFile(path) as archive:
        header = json.loads(archive.read("header.json"))
        names = [n for n in archive.namelist() if n.startswith("samples/")]
        return header["eval"], [json.loads(archive.read(n)) for n in names]


def _completion(sample: dict[str, Any]) -> str:
    content = sample["output"]["choices"][0]["message"]["content"]
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if block.get("type") == "text")


def _expected(root: Path) -> dict[str, dict[str, Any]]:
    """Per benchmark (task name): items, labelled items, predictions and scores per detector."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted([*root.rglob("*.eval"), *root.rglob("*.json")]):
        spec, samples = _raw_log(path)
        bench = out.setdefault(
            spec["task"].rsplit("/", 1)[-1],
            {"items": set(), "labelled": set(), "predictions": {}, "scores": {}},
        )
        model = spec["model"]
        for s in samples:
            bench["items"].add(str(s["id"]))
            if s["target"].strip():
                bench["labelled"].add(str(s["id"]))
            scores = s.get("scores") or {}
            answer = next((v["answer"] for v in scores.values() if v.get("answer")), None)
            if answer is None and not s.get("choices"):
                answer = _completion(s).strip() or None
            if answer is not None:
                bench["predictions"].setdefault(model, set()).add(str(s["id"]))
            for scorer, v in scores.items():
                key = f"inspect/{scorer}/{model}"
                bench["scores"].setdefault(key, {})[str(s["id"])] = LETTERS[v["value"]]
    return out


def _stored(session: Session, name: str) -> dict[str, Any]:
    bench = get_benchmark(session, name)
    items = set(
        session.scalars(select(Instance.external_id).where(Instance.benchmark_id == bench.id))
    )
    predictions: dict[str, set[str]] = {}
    q = (
        select(Detector.name, Instance.external_id)
        .join(Prediction, Prediction.detector_id == Detector.id)
        .join(Instance, Instance.id == Prediction.instance_id)
        .where(Instance.benchmark_id == bench.id)
    )
    for detector, ext in session.execute(q):
        predictions.setdefault(detector, set()).add(ext)
    scores: dict[str, dict[str, float]] = {}
    q = (
        select(Detector.name, Instance.external_id, Score.score)
        .join(Score, Score.detector_id == Detector.id)
        .join(Instance, Instance.id == Score.instance_id)
        .where(Instance.benchmark_id == bench.id)
    )
    for detector, ext, score in session.execute(q):
        scores.setdefault(detector, {})[ext] = score
    labelled = {k for k, v in current_labels(session, bench.id, "reference").items() if v}
    return {"items": items, "labelled": labelled, "predictions": predictions, "scores": scores}


@pytest.mark.parametrize("root", SOURCES)
def test_every_log_imports_with_the_counts_of_a_plain_read(
    factory: sessionmaker[Session], root: Path
) -> None:
    summaries = _import(factory, [root])
    expected = _expected(root)
    assert (
        {s.benchmark for s in summaries}
        == set(expected)
        == {
            "arc_easy",
            "mmlu_0_shot",
            "popularity",
            "input_task",
        }
    )
    with factory() as session:
        for name, want in expected.items():
            assert _stored(session, name) == want, name
    by_name = {s.benchmark: s for s in summaries}
    # ARC: the two models' logs join on the three items both ran (qwen 3, sonnet 5 samples).
    assert by_name["arc_easy"].instances_added == 5
    assert {k: len(v) for k, v in expected["arc_easy"]["predictions"].items()} == {
        "ollama/qwen2.5:0.5b": 3,
        "anthropic/claude-sonnet-4-0": 5,
    }
    # The unscored and the rescored popularity logs of one model agree: one prediction each.
    assert len(expected["popularity"]["predictions"]["openai/gpt-4o-mini"]) == 10
    assert by_name["popularity"].predictions_skipped >= 10


@pytest.mark.parametrize("root", SOURCES)
def test_a_second_import_changes_nothing(factory: sessionmaker[Session], root: Path) -> None:
    first = _import(factory, [root])
    before = table_counts(factory)
    again = _import(factory, [root])
    assert table_counts(factory) == before
    assert [s.added for s in again] == [0] * len(first)
    assert [s.instances_skipped for s in again] == [
        f.instances_added + f.instances_skipped for f in first
    ]
    assert [s.data_version for s in again] == [s.data_version for s in first]


def test_choice_tasks_keep_options_letters_and_answers(factory: sessionmaker[Session]) -> None:
    _import(factory, [ARC])
    spec, samples = _raw_log(ARC / "data_arc_sonnet.json")
    with factory() as session:
        bench = get_benchmark(session, "arc_easy")
        assert bench.kind == "choice"
        item = session.scalar(
            select(Instance).where(Instance.benchmark_id == bench.id, Instance.external_id == "2")
        )
        assert item is not None
        assert item.payload["options"] == samples[1]["choices"]
        assert item.payload["question"] == samples[1]["input"]
        labels = current_labels(session, bench.id, "reference")
        assert labels == {str(s["id"]): s["target"] for s in samples}
        answers = dict(
            session.execute(
                select(Detector.name, Prediction.answer)
                .join(Prediction, Prediction.detector_id == Detector.id)
                .where(Prediction.instance_id == item.id)
            ).all()
        )
        # Sample 2: qwen answered D (wrong), sonnet B (right), as their scorers say.
        assert answers == {"ollama/qwen2.5:0.5b": "D", spec["model"]: "B"}


def test_a_model_graded_scorer_is_a_judge(factory: sessionmaker[Session]) -> None:
    path = next(EXCERPTS.rglob("*input-task*.json"))
    (summary,) = _import(factory, [path])
    with factory() as session:
        judge = session.scalar(
            select(Detector).where(Detector.name == "inspect/model_graded_fact/openai/gpt-4o-mini")
        )
        assert judge is not None and judge.kind == "judge"
        score = session.scalar(select(Score).where(Score.detector_id == judge.id))
        assert score is not None and score.score == 1.0
        assert score.details["explanation"].startswith("The submission")
        bench = get_benchmark(session, "input_task")
        assert bench.kind == "answer"
        assert current_labels(session, bench.id, "reference") == {}  # the target is empty
    assert summary.scores_added == 1 and summary.predictions_added == 1


def test_epochs_give_the_first_answer_and_the_mean_score(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    data = json.loads(QWEN.read_text(encoding="utf-8"))
    data["eval"]["config"]["epochs"] = 2
    second = json.loads(json.dumps(data["samples"]))
    for s in second:
        s["epoch"] = 2
        s["scores"]["choice"].update(value="C", answer=s["target"])
    data["samples"] += second
    path = tmp_path / "two_epochs.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    (summary,) = _import(factory, [path])
    assert (summary.instances_added, summary.predictions_added, summary.scores_added) == (3, 3, 3)
    with factory() as session:
        rows = session.execute(
            select(Instance.external_id, Prediction.answer, Prediction.details).join(
                Prediction, Prediction.instance_id == Instance.id
            )
        ).all()
        scores = dict(
            session.execute(
                select(Instance.external_id, Score.score).join(
                    Score, Score.instance_id == Instance.id
                )
            ).all()
        )
    first = {str(s["id"]): s["scores"]["choice"] for s in data["samples"][:3]}
    assert {ext: answer for ext, answer, _ in rows} == {k: v["answer"] for k, v in first.items()}
    targets = {str(s["id"]): s["target"] for s in second}
    assert {ext: details["epoch_answers"] for ext, _, details in rows} == {
        k: [v["answer"], targets[k]] for k, v in first.items()
    }
    assert scores == {k: (LETTERS[v["value"]] + 1.0) / 2 for k, v in first.items()}


def _bad(tmp_path: Path, change: Any) -> Path:
    data = json.loads(QWEN.read_text(encoding="utf-8"))
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "where", "reason"),
    [
        (
            lambda d: d["samples"][1].update(target="Z"),
            "2: target",
            "expected an option letter A-D or an index 0-3, got 'Z'",
        ),
        (
            lambda d: d["samples"][2].update(target=["A", "B"]),
            "3: target",
            "several correct targets ['A', 'B']: a choice item holds one reference letter "
            "(import the task's answers with `appellate import table` instead)",
        ),
        (
            lambda d: d["samples"][2]["scores"]["choice"].update(value=[1, 2]),
            "3: scores.choice.value",
            "expected a number, C/I/P/N, yes/no, true/false or an object of them, got [1, 2]",
        ),
        (
            lambda d: d.update(samples=[]),
            "1: samples",
            "the log holds no samples (status success): only logs written with their samples "
            "can be imported",
        ),
    ],
)
def test_bad_logs_are_refused_with_their_sample_and_change_nothing(
    factory: sessionmaker[Session], tmp_path: Path, change: Any, where: str, reason: str
) -> None:
    _import(factory, [ARC / "data_arc_sonnet.json"])
    before = table_counts(factory)
    path = _bad(tmp_path, change)
    with pytest.raises(InvalidInput) as info:
        _import(factory, [path])
    assert str(info.value) == f"{path}:{where}: {reason}"
    assert table_counts(factory) == before


def test_a_file_that_is_no_log_is_refused(factory: sessionmaker[Session], tmp_path: Path) -> None:
    path = tmp_path / "broken.eval"
    path.write_bytes(b"not a zip")
    with pytest.raises(InvalidInput) as info:
        _import(factory, [path])
    assert str(info.value).startswith(f"{path}:1: record: not a readable Inspect log (header): ")
    assert sum(table_counts(factory).values()) == 0


def test_one_benchmark_for_several_tasks_is_refused(factory: sessionmaker[Session]) -> None:
    with pytest.raises(InvalidInput, match=r"^benchmark: the logs hold 4 tasks"):
        _import(factory, [EXCERPTS], benchmark="all")
    assert sum(table_counts(factory).values()) == 0


def test_without_the_package_the_message_says_how_to_install_it(
    factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "inspect_ai.log", None)  # import now raises ImportError
    with pytest.raises(MissingPackage, match=r"pip install 'appellate\[formats\]'"):
        _import(factory, [QWEN])


def test_command_line(cli_store: object, factory: sessionmaker[Session]) -> None:
    args = ["import", "inspect", str(ARC), "--benchmark", "arc"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    # The second log's three items are the first log's: joined, not added.
    assert result.stdout.startswith("arc: 2 file(s); instances +5 (3 present)")
    assert "predictions +8 (0 present)" in result.stdout
    again = CliRunner().invoke(cli, args)
    assert (
        "instances +0 (8 present)" in again.stdout and "predictions +0 (8 present)" in again.stdout
    )
    with factory() as session:
        models = Counter(
            session.scalars(
                select(Detector.name)
                .join(Prediction, Prediction.detector_id == Detector.id)
                .where(Detector.kind == "model")
            )
        )
        assert session.scalar(select(func.count()).select_from(Instance)) == 5
    assert models == {"ollama/qwen2.5:0.5b": 3, "anthropic/claude-sonnet-4-0": 5}


def test_the_upload_page_offers_it_and_the_worker_reads_it(
    factory: sessionmaker[Session],
) -> None:
    from app.services.jobs.import_upload import ImportUploadParams
    from app.web.upload_preview import preview
    from workers.jobs.import_upload import IMPORT

    assert preview(QWEN).importer == "inspect"
    params = ImportUploadParams(
        upload="0" * 32, filename=QWEN.name, importer="inspect", benchmark="uploaded"
    )
    params.validate()
    with transaction(factory) as session:
        summary = IMPORT["inspect"](session, QWEN, params)
    assert (summary.benchmark, summary.instances_added, summary.predictions_added) == (
        "uploaded",
        3,
        3,
    )
