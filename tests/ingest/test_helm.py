"""HELM run folders: the real run imports with the counts of a plain read, runs join, refusals."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.errors import InvalidInput
from app.ingest.helm import import_helm
from app.ingest.records import ImportSummary
from app.services.evidence.benchmarks import get_benchmark
from app.tables import Detector, Instance, Prediction
from tests.ingest.test_helpers import FORMATS, SHARED_FORMATS, current_labels, table_counts

EXCERPTS = FORMATS / "helm"
SHARED = SHARED_FORMATS / "helm"
SOURCES = [
    pytest.param(EXCERPTS, id="copies"),
    pytest.param(
        SHARED,
        id="shared",
        marks=pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent"),
    ),
]
RUN = next(EXCERPTS.rglob("scenario_state.json")).parent
KEY = "mmlu:subject=philosophy,method=multiple_choice_joint"


def _import(factory: sessionmaker[Session], paths: list[Path], **kw: Any) -> list[ImportSummary]:
    with transaction(factory) as session:
        return import_helm(session, paths, **kw)


def _expected(root: Path) -> dict[str, Any]:
    """Items, reference letters and each model's answers, read with plain json."""
    labels: dict[str, str] = {}
    answers: dict[str, dict[str, str]] = {}
    for path in sorted(root.rglob("scenario_state.json")):
        state = json.loads(path.read_text(encoding="utf-8"))
        model = state["adapter_spec"]["model"]
        for rs in state["request_states"]:
            mapping = rs["output_mapping"]
            correct = next(
                r["output"]["text"] for r in rs["instance"]["references"] if "correct" in r["tags"]
            )
            ext = f"{KEY}:{rs['instance']['id']}"
            labels[ext] = next(k for k, v in mapping.items() if v == correct)
            answers.setdefault(model, {})[ext] = rs["result"]["completions"][0]["text"].strip()
    return {"labels": labels, "answers": answers}


def _stored(session: Session, name: str) -> dict[str, Any]:
    bench = get_benchmark(session, name)
    answers: dict[str, dict[str, str]] = {}
    q = (
        select(Detector.name, Instance.external_id, Prediction.answer)
        .join(Prediction, Prediction.detector_id == Detector.id)
        .join(Instance, Instance.id == Prediction.instance_id)
        .where(Instance.benchmark_id == bench.id)
    )
    for detector, ext, answer in session.execute(q):
        answers.setdefault(detector, {})[ext] = answer
    return {"labels": current_labels(session, bench.id, "reference"), "answers": answers}


@pytest.mark.parametrize("root", SOURCES)
def test_the_run_imports_with_the_counts_of_a_plain_read(
    factory: sessionmaker[Session], root: Path
) -> None:
    (summary,) = _import(factory, [root])
    expected = _expected(root)
    assert summary.benchmark == "helm-mmlu"
    assert summary.instances_added == len(expected["labels"]) == 10
    assert summary.predictions_added == sum(len(a) for a in expected["answers"].values())
    with factory() as session:
        assert _stored(session, "helm-mmlu") == expected
        item = session.scalar(select(Instance).where(Instance.external_id == f"{KEY}:id147"))
        assert item is not None
        assert item.payload == {
            "question": "What does the notion of “meaning in life” refer to?",
            "options": [
                "external meaning",
                "god's plan",
                "internalmeaning",
                "meaning in an afterlife",
            ],
            "scenario": KEY,
            "split": "test",
            "subject": "philosophy",
        }
        detail = session.scalar(select(Prediction.details).where(Prediction.instance_id == item.id))
    assert detail is not None and detail["completion"] == " D" and detail["exact_match"] == 0.0


@pytest.mark.parametrize("root", SOURCES)
def test_a_second_import_changes_nothing(factory: sessionmaker[Session], root: Path) -> None:
    (first,) = _import(factory, [root])
    before = table_counts(factory)
    (again,) = _import(factory, [root])
    assert table_counts(factory) == before
    assert again.added == 0
    assert (again.instances_skipped, again.predictions_skipped) == (
        first.instances_added,
        first.predictions_added,
    )
    assert again.data_version == first.data_version


def _zip(run: Path, to: Path) -> Path:
    with zipfile.ZipFile(to, "w") as archive:
        for path in sorted(run.iterdir()):
            archive.write(path, f"{run.name}/{path.name}")
    return to


def test_a_zip_of_the_folder_is_the_same_run(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    (from_zip,) = _import(factory, [_zip(RUN, tmp_path / "run.zip")])
    assert (from_zip.instances_added, from_zip.predictions_added) == (10, 10)
    (from_folder,) = _import(factory, [RUN])
    assert from_folder.added == 0 and from_folder.instances_skipped == 10


def _copy(tmp_path: Path, change: Any, name: str = "run") -> Path:
    """The real run with its scenario_state.json changed by ``change``."""
    run = tmp_path / name
    shutil.copytree(RUN, run)
    state = json.loads((run / "scenario_state.json").read_text(encoding="utf-8"))
    change(state)
    (run / "scenario_state.json").write_text(json.dumps(state), encoding="utf-8")
    return run


def _other_model(state: dict[str, Any]) -> None:
    state["adapter_spec"]["model"] = "other/model"
    for rs in state["request_states"]:
        rs["result"]["completions"][0]["text"] = " A"


def test_runs_of_two_models_join_by_instance(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    other = _copy(tmp_path, _other_model)
    spec = json.loads((other / "run_spec.json").read_text(encoding="utf-8"))
    spec["name"] = spec["name"].replace("model=openai_gpt2", "model=other_model")
    (other / "run_spec.json").write_text(json.dumps(spec), encoding="utf-8")
    (summary,) = _import(factory, [RUN, other])
    assert (summary.instances_added, summary.instances_skipped) == (10, 10)
    assert summary.predictions_added == 20
    with factory() as session:
        stored = _stored(session, "helm-mmlu")
    assert {m: set(a.values()) for m, a in stored["answers"].items()} == {
        "openai/gpt2": {"D"},
        "other/model": {"A"},
    }


@pytest.mark.parametrize(
    ("change", "where", "reason"),
    [
        (
            lambda s: s["adapter_spec"].update(method="generation"),
            "1: adapter_spec.method",
            "not a multiple-choice run (adapter method 'generation'): its references are "
            "reference answers, not options; only multiple_choice_joint runs can be imported "
            "(a generative run's outputs can go through `appellate import table --kind answer`)",
        ),
        (
            lambda s: s["adapter_spec"].update(method="multiple_choice_separate_original"),
            "1: adapter_spec.method",
            "adapter method 'multiple_choice_separate_original' asks for each option in a "
            "request of its own; only multiple_choice_joint runs (one answer letter per "
            "instance) can be read",
        ),
        (
            lambda s: s["request_states"][3]["instance"]["references"][0]["tags"].append("correct"),
            "4: instance.references",
            "2 references are tagged correct: a choice item holds one reference letter",
        ),
        (
            lambda s: s["request_states"][4].update(output_mapping={"A": "x", "C": "y"}),
            "5: output_mapping",
            "expected option letters A, B, ... in order, got ['A', 'C']",
        ),
    ],
)
def test_bad_runs_are_refused_and_change_nothing(
    factory: sessionmaker[Session], tmp_path: Path, change: Any, where: str, reason: str
) -> None:
    _import(factory, [RUN])
    before = table_counts(factory)
    run = _copy(tmp_path, change)
    with pytest.raises(InvalidInput) as info:
        _import(factory, [run])
    assert str(info.value) == f"{run / 'scenario_state.json'}:{where}: {reason}"
    assert table_counts(factory) == before


def test_a_folder_without_a_run_is_refused(factory: sessionmaker[Session], tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"no HELM run folder \(scenario_state.json\)"):
        _import(factory, [tmp_path])
    assert sum(table_counts(factory).values()) == 0


def test_command_line(cli_store: object, factory: sessionmaker[Session]) -> None:
    args = ["import", "helm", str(EXCERPTS), "--benchmark", "philosophy"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("philosophy: 1 file(s); instances +10 (0 present)")
    assert "predictions +10 (0 present)" in result.stdout
    again = CliRunner().invoke(cli, args)
    assert "instances +0 (10 present)" in again.stdout
    with factory() as session:
        bench = get_benchmark(session, "philosophy")
        assert bench.kind == "choice"


def test_the_upload_page_offers_it_for_a_zip_and_a_lone_state_file(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    from app.services.jobs.import_upload import ImportUploadParams
    from app.web.upload_preview import preview
    from workers.jobs.import_upload import IMPORT

    lone = tmp_path / "state.json"  # the browser keeps the uploaded file's own name
    shutil.copy(RUN / "scenario_state.json", lone)
    assert preview(lone).importer == "helm"
    params = ImportUploadParams(
        upload="0" * 32, filename="run.zip", importer="helm", benchmark="uploaded"
    )
    params.validate()
    with transaction(factory) as session:
        summary = IMPORT["helm"](session, _zip(RUN, tmp_path / "run.zip"), params)
    assert (summary.benchmark, summary.instances_added, summary.predictions_added) == (
        "uploaded",
        10,
        10,
    )
    with transaction(factory) as session:
        again = IMPORT["helm"](session, lone, params)
    # Without run_spec.json a run is named by its folder (here the upload's): its own items.
    assert (again.benchmark, again.instances_added, again.predictions_added) == ("uploaded", 10, 10)
