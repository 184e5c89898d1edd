"""Models' answers on choice and answer benchmarks, and rankers scored against expert errata.

Every figure is checked against a direct count over the bundled MMLU-Redux CSVs, scikit-learn
or numpy, computed here without the project's code.
"""

from __future__ import annotations

import csv
import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
import typer
from sklearn.metrics import average_precision_score, cohen_kappa_score, f1_score, roc_auc_score
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli.metrics import register
from app.db import transaction
from app.ingest.mmlu_redux import import_mmlu_redux
from app.ingest.table import import_table
from app.services.metrics.rankers import RANKERS, compute_rankers, rank_inputs, store_rankers
from app.settings import Settings
from app.stats.summary import paired_differences
from app.tables import Detector, Instance, Score
from tests.conftest import DATA
from tests.support.auth_support import api_client

MMLU = DATA / "mmlu-redux"
LETTERS = "ABCD"
pytestmark = pytest.mark.slow


def _csv_answers() -> tuple[list[str], dict[str, dict[str, str]], dict[str, str], dict[str, int]]:
    """Models, {model: {item: answer}}, {item: label letter}, {item: defect} from the CSVs."""
    answers: dict[str, dict[str, str]] = {}
    labels: dict[str, str] = {}
    defects: dict[str, int] = {}
    models: list[str] = []
    for path in sorted(MMLU.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            columns = reader.fieldnames or []
            models = columns[
                columns.index("error_type") + 1 : columns.index("majority_llm_pred_top_3")
            ]
            for i, row in enumerate(reader, start=1):
                item = f"{path.stem}:{i}"
                labels[item] = LETTERS[int(row["groundtruth_answer"])]
                defects[item] = int(row["error_type"] != "ok")
                for m in models:
                    if row[m].strip():
                        answers.setdefault(m, {})[item] = row[m].strip()
    return models, answers, labels, defects


@pytest.fixture
def loaded(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    with transaction(factory) as session:
        import_mmlu_redux(session, [MMLU], "mmlu")
    return factory


@pytest.fixture
def runner(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    return CliRunner()


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _metrics(runner: CliRunner, cli: typer.Typer, *args: str) -> dict:
    result = runner.invoke(cli, ["metrics", "mmlu", *args, "--resamples", "300", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_model_accuracy_macro_f1_agreement_and_confusion_equal_direct_counts(
    loaded: sessionmaker[Session], runner: CliRunner, cli: typer.Typer
) -> None:
    models, answers, labels, _ = _csv_answers()
    report = _metrics(runner, cli, "--label", "reference", "--slice", "subject")
    assert report["kind"] == "answers" and report["positive"] is None
    overall = {r["detector"]: r for r in report["rows"] if r["slice"] is None}
    assert sorted(overall) == sorted(models) and len(models) == 14
    for m in models:
        row, given = overall[m], answers[m]
        right = sum(given[i] == labels[i] for i in given)
        assert row["n"] == len(given)
        assert abs(row["answer_accuracy"] - right / len(given)) <= 1e-12
        lo, hi = row["answer_accuracy_ci"]
        assert lo <= row["answer_accuracy"] <= hi and hi - lo < 0.2
        items = sorted(given)
        y = [labels[i] for i in items]
        pred = [given[i] for i in items]
        present = sorted(set(y) | ({*pred} & set(LETTERS)))
        assert abs(row["macro_f1"] - f1_score(y, pred, labels=present, average="macro")) <= 1e-12
    # Per subject and the macro-average over the 29 subjects.
    claude = [r for r in report["rows"] if r["detector"] == models[0]]
    assert len(claude) == 1 + 29 + 1 and claude[-1]["slice"] == "(macro-average)"
    per_subject = [r["answer_accuracy"] for r in claude[1:-1]]
    assert abs(claude[-1]["answer_accuracy"] - np.mean(per_subject)) <= 1e-12
    # Each model against the most accurate one.
    best = max(models, key=lambda m: overall[m]["answer_accuracy"])
    pairs = {c["first"]: c for c in report["comparisons"]}
    assert set(pairs) == set(models) - {best} and {c["second"] for c in pairs.values()} == {best}
    some = next(iter(pairs.values()))["metrics"][0]
    assert some["metric"] == "answer_accuracy" and some["difference"] < 0
    # Agreement and Cohen's kappa of every pair, on the items both answered.
    assert len(report["agreement"]) == 14 * 13 // 2
    for pair in report["agreement"][:20]:
        a, b = answers[pair["first"]], answers[pair["second"]]
        both = sorted(set(a) & set(b))
        assert pair["n"] == len(both)
        assert abs(pair["agreement"] - np.mean([a[i] == b[i] for i in both])) <= 1e-12
        kappa = cohen_kappa_score([a[i] for i in both], [b[i] for i in both])
        assert abs(pair["kappa"] - kappa) <= 1e-9
    # Confusion: label option x answer option (plus answers naming no option).
    for m in models[:3]:
        counts = np.zeros((4, 5), dtype=int)
        for item, answer in answers[m].items():
            counts[
                LETTERS.index(labels[item]), LETTERS.index(answer) if answer in LETTERS else 4
            ] += 1
        assert report["confusion"][m]["counts"] == counts.tolist()


def _ranker_scores(session: Session) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    q = (
        select(Detector.name, Instance.external_id, Score.score)
        .join(Score, Score.detector_id == Detector.id)
        .join(Instance, Instance.id == Score.instance_id)
        .where(Detector.kind == "ranker")
    )
    for name, item, score in session.execute(q):
        out.setdefault(name, {})[item] = score
    return out


def _precision_at(y: np.ndarray, s: np.ndarray, k: int) -> float:
    """Positives among the top k, a tie at the cut shared in proportion (numpy, by hand)."""
    order = np.argsort(-s, kind="stable")
    threshold = s[order][k - 1]
    above, tied = s > threshold, s == threshold
    return (y[above].sum() + (k - above.sum()) * y[tied].mean()) / k


def test_rankers_against_the_experts_equal_sklearn_from_the_stored_scores(
    loaded: sessionmaker[Session], runner: CliRunner, cli: typer.Typer
) -> None:
    with transaction(loaded) as s:
        inputs = rank_inputs(s, "mmlu")
    with transaction(loaded) as s:
        store_rankers(s, inputs, compute_rankers(inputs))
    report = _metrics(runner, cli, "--label", "defect")
    rows = {r["detector"]: r for r in report["rows"] if r["slice"] is None}
    with loaded() as s:
        stored = _ranker_scores(s)
    _, _, _, defects = _csv_answers()
    # Every registered ranker but the one that reads a local model's probabilities.
    assert set(rows) == set(stored) == {r.detector for r in RANKERS.values() if not r.needs_local}
    for name, scores in stored.items():
        items = sorted(scores)
        y = np.array([defects[i] for i in items])
        s = np.array([scores[i] for i in items])
        row = rows[name]
        assert abs(row["auroc"] - roc_auc_score(y, s)) <= 1e-9
        assert abs(row["auprc"] - average_precision_score(y, s)) <= 1e-9
        for k in (50, 100, 200):
            assert abs(row[f"precision_at_{k}"] - _precision_at(y, s, k)) <= 1e-9
            assert abs(row[f"recall_at_{k}"] - _precision_at(y, s, k) * k / y.sum()) <= 1e-9
        for metric in ("auroc", "auprc", "precision_at_100"):
            lo, hi = row[f"{metric}_ci"]
            assert lo <= row[metric] <= hi
    # The consensus ranker, from the CSVs: AUROC .719; precision@100 .310 now that its ties go
    # to the stronger plurality for another option (.317 with the tie at the cut shared).
    assert rows["ranker:consensus"]["auroc"] == pytest.approx(0.719, abs=5e-4)
    assert rows["ranker:consensus"]["precision_at_100"] == pytest.approx(0.310, abs=1e-3)
    # Every other ranker is paired with consensus on shared resamples, exactly as a paired
    # bootstrap of the two gives (the report reuses each ranker's own resamples).
    firsts = {c["first"] for c in report["comparisons"] if c["second"] == "ranker:consensus"}
    assert firsts == set(rows) - {"ranker:consensus"}
    pair = next(c for c in report["comparisons"] if c["first"] == "ranker:cleanlab")
    # In import order (subject files sorted, rows in order), as the report reads them.
    items = [f"{p.stem}:{i}" for p in sorted(MMLU.glob("*.csv")) for i in range(1, 101)]
    y = np.array([defects[i] for i in items])
    direct = paired_differences(
        y,
        np.array([stored["ranker:cleanlab"][i] for i in items]),
        np.array([stored["ranker:consensus"][i] for i in items]),
        [i.split(":")[0] for i in items],
        [m["metric"] for m in pair["metrics"]],
        resamples=300,
    )
    assert pair["metrics"] == direct


def test_the_metrics_page_of_a_choice_benchmark(
    loaded: sessionmaker[Session], settings: Settings
) -> None:
    with api_client(settings, role="reviewer") as client:
        page = client.get(
            "/benchmarks/mmlu/metrics", params={"label": "reference", "resamples": 50}
        )
        api = client.get(
            "/api/benchmarks/mmlu/metrics", params={"label": "reference", "resamples": 50}
        )
        # Issue 21 item 7: every model's link led to a score filter the table refused (422).
        table_links = set(re.findall(r'href="(/benchmarks/mmlu(?:\?[^"]*)?)"', page.text))
        assert table_links
        broken = {
            link: status
            for link in table_links
            if (status := client.get(html.unescape(link)).status_code) != 200
        }
    assert broken == {}
    assert page.status_code == 200 and api.status_code == 200
    header = re.search(r'<table class="grid metric-matrix">.*?</thead>', page.text, re.S)
    assert header is not None and "Accuracy" in header.group(0) and "Macro-F1" in header.group(0)
    assert "Agreement between models" in page.text and "Confusion matrices" in page.text
    body = api.json()
    assert body["kind"] == "answers" and len(body["rows"]) == 14
    metrics = {"answer_accuracy", "answer_accuracy_ci", "macro_f1", "macro_f1_ci"}
    assert set(body["rows"][0]) == {"detector", "slice", "n", *metrics}


def test_an_answer_benchmark_graded_numerically(
    factory: sessionmaker[Session], runner: CliRunner, cli: typer.Typer, tmp_path: Path
) -> None:
    rows = [
        {
            "id": "q1",
            "question": "2 + 2?",
            "gold": "4",
            "m1": "4",
            "m2": "The answer is 4.",
            "m3": "5",
        },
        {"id": "q2", "question": "3 * 3?", "gold": "9", "m1": "9.0", "m2": "nine", "m3": "9"},
        {"id": "q3", "question": "10 / 4?", "gold": "2.5", "m1": "2.5", "m2": "2.50", "m3": ""},
    ]
    path = tmp_path / "arith.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with transaction(factory) as s:
        import_table(
            s, path, "answer", id_column="id", labels={"reference": "gold"},
            answers={m: m for m in ("m1", "m2", "m3")}, grader="numeric", benchmark="arith",
        )  # fmt: skip
    result = runner.invoke(cli, ["metrics", "arith", "--resamples", "100", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    accuracy = {r["detector"]: (r["n"], r["answer_accuracy"]) for r in report["rows"]}
    assert accuracy == {"m1": (3, 1.0), "m2": (3, pytest.approx(2 / 3)), "m3": (2, 0.5)}
    assert "macro_f1" not in report["rows"][0]  # free-text answers have no classes
    assert "numeric" in report["target_rule"]


def test_the_instance_page_of_a_choice_item(
    loaded: sessionmaker[Session], settings: Settings
) -> None:
    _, answers, labels, _ = _csv_answers()
    item = "astronomy:1"
    with api_client(settings, role="reviewer") as client:
        page = client.get(f"/benchmarks/mmlu/instances/{item}")
        api = client.get(f"/api/benchmarks/mmlu/instances/{item}").json()
    assert page.status_code == 200
    options = {o["letter"]: o for o in api["answers"]["options"]}
    assert list(options) == list(LETTERS)
    for letter, option in options.items():
        chose = sorted(m for m, given in answers.items() if given.get(item) == letter)
        assert option["models"] == chose
        assert option["is_label"] == (letter == labels[item])
    label_row = re.search(r'<tr class="option is-label">(.*?)</tr>', page.text, re.S)
    assert label_row is not None and f'<th class="letter">{labels[item]}' in label_row.group(0)
    assert "Expert annotation of the label" in page.text
    assert page.text.count('<meter class="share"') == 4
