"""lm-evaluation-harness samples: counts against the raw files, option probabilities, refusals.

Every expected figure is computed here from the raw JSONL with plain json and numpy, never with
the importer's code.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.errors import InvalidInput
from app.ingest.lm_eval import import_lm_eval
from app.ingest.records import ImportSummary
from app.services.evidence.answer_matrix import load_answers
from app.services.evidence.benchmarks import get_benchmark
from app.services.jobs.import_upload import ImportUploadParams
from app.services.metrics import rankers
from app.stats import crowd_rankers, label_errors
from app.tables import Detector, ImportRecord, Instance, Prediction
from tests.ingest.test_helpers import FORMATS, SHARED_FORMATS, read_jsonl, table_counts, write_jsonl
from workers.jobs.import_upload import IMPORT

HERE = FORMATS / "lm_eval"
SMOLLM2 = HERE / "smollm2"
MATH = HERE / "eee-math-perturbed"
SHARED = SHARED_FORMATS / "lm_eval"
SOURCES = [
    pytest.param(MATH, id="math-excerpt"),
    pytest.param(SMOLLM2, id="smollm2"),
    pytest.param(
        SHARED,
        id="shared",
        marks=pytest.mark.skipif(
            not SHARED.is_dir(), reason=f"{SHARED} is absent (the full files live outside git)"
        ),
    ),
]
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _import(factory: sessionmaker[Session], paths: list[Path], **kw: Any) -> ImportSummary:
    with transaction(factory) as session:
        return import_lm_eval(session, paths, **kw)


def _samples(root: Path) -> list[Path]:
    return sorted(root.rglob("samples_*.jsonl"))


def _task(path: Path) -> str:
    """The task in ``samples_<task>_<time>.jsonl`` (the time has no underscore)."""
    return path.stem.removeprefix("samples_").rsplit("_", 1)[0]


def _lls(row: dict[str, Any]) -> np.ndarray:
    """Per-choice log-likelihoods of a multiple-choice row, as the harness 0.4 writes them."""
    return np.array([float(r[0]) for r in row["filtered_resps"]])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _predictions(session: Session, benchmark: str) -> dict[tuple[str, str], Prediction]:
    bench = get_benchmark(session, benchmark)
    q = (
        select(Detector.name, Instance.external_id, Prediction)
        .join(Prediction, Prediction.detector_id == Detector.id)
        .join(Instance, Instance.id == Prediction.instance_id)
        .where(Instance.benchmark_id == bench.id)
    )
    return {(d, ext): p for d, ext, p in session.execute(q)}


@pytest.mark.parametrize("root", SOURCES)
def test_every_file_imports_twice_with_counts_equal_to_the_raw_rows(
    factory: sessionmaker[Session], root: Path
) -> None:
    rows = [(path, r) for path in _samples(root) for r in read_jsonl(path)]
    items = {(_task(path), r["doc_hash"]) for path, r in rows}
    labelled = {(_task(path), r["doc_hash"]) for path, r in rows if r["target"] not in ("", None)}
    runs = {path.parent for path, _ in rows}

    first = _import(factory, [root], benchmark="lm")
    assert first.instances_added == len(items)
    assert first.instances_skipped == len(rows) - len(items)  # the same docs in other runs
    assert first.predictions_added == len(rows)
    assert first.labels_added == len(labelled)
    assert len(first.files) == len(_samples(root))
    before = table_counts(factory)

    again = _import(factory, [root], benchmark="lm")
    assert (again.added, again.instances_skipped) == (0, len(rows))
    assert again.predictions_skipped == len(rows)
    assert again.data_version == first.data_version
    assert table_counts(factory) == before
    with factory() as session:
        detectors = {d for d, _ in _predictions(session, "lm")}
    assert len(detectors) == len(runs)


def test_generative_answers_are_the_filtered_responses_graded_like_exact_match(
    factory: sessionmaker[Session],
) -> None:
    (path,) = _samples(MATH)
    raw = read_jsonl(path)
    results = json.loads(next(MATH.glob("results_*.json")).read_text(encoding="utf-8"))
    _import(factory, [MATH], benchmark="math")
    with factory() as session:
        bench = get_benchmark(session, "math")
        assert (bench.kind, bench.details["grader"]) == ("answer", "exact")
        stored = _predictions(session, "math")
        matrix = load_answers(session, bench)
    (detector,) = {d for d, _ in stored}
    assert detector == f"{results['model_name']} [0-shot, bfloat16]"
    for r in raw:
        p = stored[(detector, f"math_perturbed_full:{r['doc_hash'][:16]}")]
        # filtered_resps is singly nested here ([text]); resps doubly ([[text]]).
        assert p.answer == r["filtered_resps"][0] == r["resps"][0][0]
        assert p.details["metrics"] == {"exact_match": r["exact_match"]}
    exact = {f"math_perturbed_full:{r['doc_hash'][:16]}": float(r["exact_match"]) for r in raw}
    assert matrix.correct()[:, 0].tolist() == [exact[ext] for ext in matrix.external_ids]


def _smollm2_rows() -> dict[str, list[dict[str, Any]]]:
    """Each run's rows by its folder name (fp32-0shot, ...)."""
    return {
        path.relative_to(SMOLLM2 / "runs").parts[0]: read_jsonl(path) for path in _samples(SMOLLM2)
    }


def _detector_of(session: Session, run: str) -> str:
    """The detector made from one run folder (its import record names it)."""
    q = select(ImportRecord.counts, ImportRecord.file_name)
    names = {
        counts["detector"]
        for counts, name in session.execute(q)
        if name == _samples(SMOLLM2 / "runs" / run)[0].name
    }
    (name,) = names
    return name


def test_smollm2_runs_are_a_choice_benchmark_with_the_argmax_answer_and_softmax_probabilities(
    factory: sessionmaker[Session],
) -> None:
    runs = _smollm2_rows()
    assert len(runs) >= 3
    _import(factory, [SMOLLM2])
    with factory() as session:
        bench = get_benchmark(session, "mmlu_redux_local")
        assert bench.kind == "choice"
        stored = _predictions(session, "mmlu_redux_local")
        names = {run: _detector_of(session, run) for run in runs}
    assert len(set(names.values())) == len(runs)  # one detector per run configuration
    assert names["fp32-0shot"].endswith("[0-shot, float32]")
    assert names["fp32-2shot"].endswith("[2-shot, float32]")
    assert names["bf16-0shot"].endswith("[0-shot, bfloat16]")
    for run, rows in runs.items():
        for r in rows:
            p = stored[(names[run], f"mmlu_redux_local:{r['doc_hash'][:16]}")]
            lls = _lls(r)
            k = len(lls)
            assert p.answer == LETTERS[int(np.argmax(lls))]
            # The harness's own acc says whether that argmax is the gold index.
            assert float(p.answer == LETTERS[int(r["target"])]) == r["acc"]
            probs = np.array([p.probabilities[c] for c in LETTERS[:k]])
            np.testing.assert_allclose(probs, _softmax(lls), rtol=1e-12)
            lengths = np.array([len(c) for c in r["doc"]["choices"]], dtype=float)
            norm = np.array([p.details["length_normalised"][c] for c in LETTERS[:k]])
            np.testing.assert_allclose(norm, _softmax(lls / lengths), rtol=1e-12)
            assert float(p.details["answer_norm"] == LETTERS[int(r["target"])]) == r["acc_norm"]


def test_rank_errors_runs_and_the_cleanlab_ranker_reads_the_softmax_of_the_log_likelihoods(
    factory: sessionmaker[Session],
) -> None:
    runs = _smollm2_rows()
    _import(factory, [SMOLLM2], benchmark="smol")
    with factory() as session:
        inputs = rankers.rank_inputs(session, "smol")
        local_name = inputs.matrix.models[inputs.local]
        local_run = next(run for run in runs if _detector_of(session, run) == local_name)
    matrix = inputs.matrix
    # Every model votes, each with its option probabilities.
    assert inputs.local is not None and inputs.voters == list(range(len(matrix.models)))
    # The rankers read answers and probabilities as arrays; the row-by-row reader agrees.
    with factory() as session:
        rows = load_answers(session, get_benchmark(session, "smol"))
    assert rows.models == matrix.models and rows.option_probs is None
    np.testing.assert_array_equal(matrix.answer_codes(), rows.answer_codes())
    assert matrix.answers == rows.answers
    for j in range(len(matrix.models)):
        np.testing.assert_allclose(
            matrix.option_probabilities(j), rows.option_probabilities(j), rtol=1e-15
        )
    # Each model's soft vote is its probabilities: the soft consensus is 1 - their mean.
    p_label = np.stack(
        [rows.option_probabilities(j)[np.arange(len(rows.labels)), rows.label_codes()]
         for j in range(len(rows.models))],
        axis=1,
    )  # fmt: skip
    soft = crowd_rankers.soft_consensus(inputs.evidence.votes, inputs.evidence.labels)
    np.testing.assert_allclose(soft, 1 - p_label.mean(axis=1), atol=1e-12)
    # The cleanlab ranker's input: the local model's option probabilities, row by row.
    probs, have = rankers._local_probs(inputs)
    assert have.all()
    expected = {
        f"mmlu_redux_local:{r['doc_hash'][:16]}": _softmax(_lls(r)) for r in runs[local_run]
    }
    want = np.stack([expected[ext] for ext in matrix.external_ids])
    np.testing.assert_allclose(probs, want, rtol=1e-12)
    labels = np.array([LETTERS.index(v) for v in matrix.labels])
    result = rankers.compute_rankers(inputs)
    np.testing.assert_allclose(
        result.scores["cleanlab-local"], label_errors.cleanlab_scores(labels, want), rtol=1e-9
    )
    assert {"consensus", "cleanlab", "cleanlab-local"} <= set(result.scores)
    with transaction(factory) as session:
        stored = rankers.store_rankers(session, inputs, result)
    assert stored  # the rank-errors job's write went through


def _bad_copy(tmp_path: Path, edit: Any) -> Path:
    """A copy of the first SmolLM2 run folder whose samples lines pass through ``edit``."""
    source = _samples(SMOLLM2)[0]
    folder = tmp_path / "run"
    shutil.copytree(source.parent, folder)
    target = folder / source.name
    lines = source.read_text(encoding="utf-8").splitlines()
    target.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    return folder


def _drop_doc(lines: list[str]) -> list[str]:
    row = json.loads(lines[4])
    del row["doc"]
    return [*lines[:4], json.dumps(row), *lines[5:]]


def _bad_loglikelihood(lines: list[str]) -> list[str]:
    row = json.loads(lines[1])
    row["filtered_resps"][2] = ["not a number", "False"]
    return [lines[0], json.dumps(row), *lines[2:]]


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        pytest.param(
            lambda ls: [*ls[:2], ls[2][:-5], *ls[3:]], ":3: record: malformed JSON", id="json"
        ),
        pytest.param(_drop_doc, ":5: doc: missing field", id="missing"),
        pytest.param(
            _bad_loglikelihood, ":2: filtered_resps[2]: expected a log-likelihood", id="ll"
        ),
    ],
)
def test_bad_input_is_refused_with_file_line_field_and_the_store_is_unchanged(
    factory: sessionmaker[Session], tmp_path: Path, edit: Any, where: str
) -> None:
    _import(factory, [MATH], benchmark="lm")  # a store with something in it
    before = table_counts(factory)
    folder = _bad_copy(tmp_path, edit)
    with pytest.raises(InvalidInput) as caught:
        _import(factory, [folder], benchmark="lm-bad")
    assert where in str(caught.value)
    assert str(caught.value).startswith(str(folder))
    assert table_counts(factory) == before


def test_both_nestings_of_resps_give_the_same_answers(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """filtered_resps [[ll, greedy]] (0.4) and resps alone [[[ll, greedy]]] (doubly nested)."""
    source = _samples(SMOLLM2)[0]
    old = shutil.copytree(source.parent, tmp_path / "old")
    rows = read_jsonl(source)
    for r in rows:
        assert r["resps"] == [[x] for x in r["filtered_resps"]]  # as the harness wrote them
        del r["filtered_resps"]
    write_jsonl(old / source.name, rows)
    generative = shutil.copytree(MATH, tmp_path / "gen")
    math_rows = read_jsonl(_samples(MATH)[0])
    for r in math_rows:
        r["filtered_resps"] = [r["filtered_resps"]]  # [[text]]
    write_jsonl(generative / _samples(MATH)[0].name, math_rows)

    _import(factory, [source.parent], benchmark="current")
    _import(factory, [old], benchmark="old")
    _import(factory, [MATH], benchmark="gen-new")
    _import(factory, [generative], benchmark="gen-old")
    with factory() as session:
        for a, b in (("current", "old"), ("gen-new", "gen-old")):
            new = {k: (p.answer, p.probabilities) for k, p in _predictions(session, a).items()}
            was = {k: (p.answer, p.probabilities) for k, p in _predictions(session, b).items()}
            assert new == was and len(new) > 0


def test_the_cli_imports_a_run_folder_and_a_lone_samples_file_imports_as_an_upload(
    cli_store: object, factory: sessionmaker[Session], tmp_path: Path
) -> None:
    args = ["import", "lm-eval", str(SMOLLM2), "--benchmark", "smol"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    rows = sum(len(r) for r in _smollm2_rows().values())
    assert result.output.startswith("smol: 3 file(s); instances +40 (")
    assert f"predictions +{rows} (0 present)" in result.output
    again = CliRunner().invoke(cli, args)
    assert "instances +0" in again.output and f"predictions +0 ({rows} present)" in again.output

    lone = tmp_path / _samples(MATH)[0].name
    shutil.copyfile(_samples(MATH)[0], lone)  # uploaded alone: no results file beside it
    with transaction(factory) as session:
        summary = IMPORT["lm-eval"](
            session, lone, ImportUploadParams("0" * 32, lone.name, "lm-eval", "up")
        )
        names = set(
            session.scalars(select(Detector.name).where(Detector.name.like("lm-eval run %")))
        )
    assert summary.predictions_added == len(read_jsonl(lone))
    assert names == {"lm-eval run 2026-01-21T03-44-18.458309"}
