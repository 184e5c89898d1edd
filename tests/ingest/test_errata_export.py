"""Errata export: review decisions as MMLU-Redux error types, read back by import mmlu-redux."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.errors import InvalidInput
from app.ingest.export.errata import ERRATA_COLUMNS, REPORT_NAME, export_errata
from app.ingest.export.error_types import error_type_of
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.accounts.users import Principal, create_user
from app.services.evidence.answer_matrix import load_answers
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.detectors import ensure_detector
from app.services.evidence.resolution import Event, Resolution, resolve
from app.services.metrics.answer_changes import accuracy_changes
from app.services.metrics.answer_metrics import answer_report
from app.services.metrics.metrics_query import MetricsQuery
from app.services.review import queues
from app.tables import Instance, Role, Score
from tests.conftest import DATA
from tests.ingest.test_helpers import current_labels

SUBJECTS = [DATA / "mmlu-redux" / "astronomy.csv", DATA / "mmlu-redux" / "abstract_algebra.csv"]
LETTERS = "ABCD"


@dataclass(frozen=True)
class Decision:
    """What review does to one queue item, and the error type the export must give it."""

    kind: str  # "adjudication", "votes" (two agreeing annotators) or "vote" (one: undecided)
    value: str | None  # "other": an option letter other than the original
    expected: str | None
    reason: str = ""
    tags: tuple[str, ...] = ()


DECISIONS = {
    "astronomy:1": Decision("adjudication", "other", "wrong_groundtruth", "the key is off by one"),
    "astronomy:2": Decision("adjudication", "no correct option", "no_correct_answer"),
    "astronomy:3": Decision("adjudication", "several correct", "multiple_correct_answers"),
    "astronomy:4": Decision(
        "adjudication", "question unclear", "bad_options_clarity", tags=("bad options clarity",)
    ),
    "astronomy:5": Decision("adjudication", "original", "ok", "checked in a textbook"),
    "abstract_algebra:1": Decision(
        "adjudication", "original", "bad_question_clarity", tags=("bad question clarity",)
    ),
    "abstract_algebra:2": Decision("votes", "other", "wrong_groundtruth", "B is the group order"),
    "abstract_algebra:3": Decision(
        "adjudication", "original", "expert", "error_type: expert (needs a group theorist)"
    ),
    "abstract_algebra:4": Decision("vote", "other", None),
    "abstract_algebra:5": Decision("adjudication", None, None, "no label fits"),
}


@dataclass(frozen=True)
class Reviewed:
    """The reviewed benchmark: its queue and each item's original and decided labels."""

    queue_id: int
    original: dict[str, str]
    decided: dict[str, str | None]


def _principal(session: Session, name: str, role: Role) -> Principal:
    user = create_user(session, name, role.value)
    return Principal(user.id, name, role, token_id=0)


@pytest.fixture
def reviewed(factory: sessionmaker[Session]) -> Reviewed:
    with transaction(factory) as s:
        import_mmlu_redux(s, SUBJECTS, "mmlu")
        bench = get_benchmark(s, "mmlu")
        original = {k: v for k, v in current_labels(s, bench.id, "reference").items() if v}
        ids = dict(s.execute(select(Instance.external_id, Instance.id)).all())
        rita = _principal(s, "rita", Role.reviewer)
        voters = [_principal(s, n, Role.annotator) for n in ("ann", "bob")]
        queue = queues.create_queue(
            s,
            bench,
            [ids[ext] for ext in DECISIONS],
            name="check labels",
            label_name="reference",
            source="filter",
            overlap_k=2,
        )
        ranker = ensure_detector(s, "ranker:consensus", "ranker")
        s.add_all(Score(detector_id=ranker.id, instance_id=ids[e], score=0.75) for e in DECISIONS)
        decided: dict[str, str | None] = {}
        for ext, d in DECISIONS.items():
            other = next(x for x in LETTERS if x != original[ext])
            value = {"other": other, "original": original[ext]}.get(d.value or "", d.value)
            decided[ext] = value
            who = [rita] if d.kind == "adjudication" else voters[: 1 + (d.kind == "votes")]
            for person in who:
                queues.record(
                    s,
                    queue,
                    ids[ext],
                    person,
                    kind="adjudication" if d.kind == "adjudication" else "vote",
                    value=value,
                    seen_version=queues.label_version(s, ids[ext], "reference"),
                    reason=d.reason,
                    tags=d.tags,
                )
        return Reviewed(queue.id, original, decided)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_errata_round_trip_through_import_mmlu_redux(
    factory: sessionmaker[Session], reviewed: Reviewed, tmp_path: Path
) -> None:
    out = tmp_path / "errata"
    with factory() as s:
        summary = export_errata(s, "mmlu", out, queue=reviewed.queue_id, resamples=200)
    expected = {ext: d.expected for ext, d in DECISIONS.items() if d.expected is not None}
    assert summary.items == len(expected) == 8
    assert summary.undecided == 1  # one vote of k = 2
    assert summary.untyped == ["abstract_algebra:5"]
    assert summary.by_type == {
        "ok": 1,
        "wrong_groundtruth": 2,
        "no_correct_answer": 1,
        "multiple_correct_answers": 1,
        "bad_question_clarity": 1,
        "bad_options_clarity": 1,
        "expert": 1,
    }
    assert sorted(p.name for p in out.iterdir()) == [
        "abstract_algebra.csv",
        "astronomy.csv",
        REPORT_NAME,
    ]
    source_rows = {
        f"{path.stem}:{n}": row for path in SUBJECTS for n, row in enumerate(_rows(path), 1)
    }
    written = {}
    for path in sorted(out.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as fh:
            assert tuple(next(csv.reader(fh))) == ERRATA_COLUMNS
        for row in _rows(path):
            ext = row["source"].removeprefix("appellate:mmlu/")
            written[ext] = row
            assert ext.startswith(path.stem + ":")
    assert set(written) == set(expected)
    for ext, row in written.items():
        source = source_rows[ext]
        assert (row["question"], row["choices"]) == (source["question"], source["choices"])
        assert row["answer"] == source["groundtruth_answer"]
        assert row["error_type"] == expected[ext]
        changed = expected[ext] == "wrong_groundtruth"
        assert row["correct_answer"] == (reviewed.decided[ext] if changed else "")
        assert row["potential_reason"] == DECISIONS[ext].reason

    # Read back: the same questions, options and original labels, with the review's errata.
    with transaction(factory) as s:
        back = import_mmlu_redux(s, [out], "mmlu-errata")
        assert back.instances_added == 8 and back.predictions_added == 0
        bench = get_benchmark(s, "mmlu-errata")
        items = {
            (i.payload["subject"], i.payload["question"]): i
            for i in s.scalars(select(Instance).where(Instance.benchmark_id == bench.id))
        }
        errata = current_labels(s, bench.id, "errata")
        reference = current_labels(s, bench.id, "reference")
        defect = current_labels(s, bench.id, "defect")
        source_items = {
            i.external_id: i
            for i in s.scalars(
                select(Instance).where(Instance.benchmark_id == get_benchmark(s, "mmlu").id)
            )
        }
    for ext, kind in expected.items():
        source = source_items[ext]
        item = items[(source.payload["subject"], source.payload["question"])]
        assert item.payload["options"] == source.payload["options"]
        assert errata[item.external_id] == kind
        assert reference[item.external_id] == reviewed.original[ext]
        assert defect[item.external_id] == ("0" if kind == "ok" else "1")


def test_upstream_report_holds_the_evidence(
    factory: sessionmaker[Session], reviewed: Reviewed, tmp_path: Path
) -> None:
    with factory() as s:
        export_errata(s, "mmlu", tmp_path / "e", queue=reviewed.queue_id, resamples=200)
        n_models = len(load_answers(s, get_benchmark(s, "mmlu")).models)
    report = (tmp_path / "e" / REPORT_NAME).read_text(encoding="utf-8")
    assert report.startswith("# mmlu: label errors found in review\n")
    assert "| wrong_groundtruth | 2 |" in report and "| expert | 1 |" in report
    accuracy = report.split(
        "| model | original (n) | corrected (n) | Δ (n) |\n|---|---:|---:|---:|\n"
    )
    table = accuracy[1].split("\n\n")[0].splitlines()
    assert len(table) == n_models == 14
    assert all(re.fullmatch(r"\| .+ \| 0\.\d{3} \[.+\] \(\d+\) \|.+\|", row) for row in table)
    first = report.split("### 1. `abstract_algebra:1`")[1].split("### 2.")[0]
    assert "bad_question_clarity" in report.split("### 1. ")[1].splitlines()[0]
    assert "`ranker:consensus` 0.750" in first
    assert "Adjudicated" in first and "(tags: bad question clarity)" in first
    wrong = report.split("`astronomy:1`: wrong_groundtruth")[1].split("###")[0]
    old, new = reviewed.original["astronomy:1"], reviewed.decided["astronomy:1"]
    assert f"- **{old}.**" in wrong and "← original label" in wrong
    assert f"- **{new}.**" in wrong and "← corrected label" in wrong
    assert "by rita on" in wrong and '"the key is off by one"' in wrong
    votes = report.split("`abstract_algebra:2`")[1].split("###")[0]
    assert "Votes: ann: " in votes and "Decided by 2 unanimous votes" in votes
    # Each option line counts the models that chose it; together, every model that answered.
    counted = sum(int(n) for n in _model_counts(wrong))
    assert f"Models' answers: {counted} of {n_models} models answered." in wrong


def _model_counts(section: str) -> list[str]:
    return re.findall(r"\((\d+) models?: ", section)


def test_accuracy_changes_are_the_answer_metrics(
    factory: sessionmaker[Session], reviewed: Reviewed
) -> None:
    with factory() as s:
        bench = get_benchmark(s, "mmlu")
        before = load_answers(s, bench)
        after = load_answers(s, bench, labels="resolved", k=2)
        changes = accuracy_changes(before, after, resamples=300, seed=3)
        reports = {
            mode: {
                r["detector"]: r
                for r in answer_report(s, MetricsQuery("mmlu", labels=mode, resamples=300, seed=3))[
                    "rows"
                ]
                if r["slice"] is None
            }
            for mode in ("original", "resolved")
        }
    assert len(changes) == 14
    correct_before, correct_after = before.correct(), after.correct()
    for j, c in enumerate(changes):
        for est, n, mode in (
            (c.original, c.n_original, "original"),
            (c.corrected, c.n_corrected, "resolved"),
        ):
            row = reports[mode][c.model]
            assert (est.value, est.ci, n) == (
                row["answer_accuracy"],
                row["answer_accuracy_ci"],
                row["n"],
            )
        # Macro-F1 of each side is the answer report's too.
        for est, mode in ((c.original_macro_f1, "original"), (c.corrected_macro_f1, "resolved")):
            row = reports[mode][c.model]
            assert est is not None and (est.value, est.ci) == (row["macro_f1"], row["macro_f1_ci"])
        both = ~np.isnan(correct_before[:, j]) & ~np.isnan(correct_after[:, j])
        assert c.n_both == int(both.sum())
        delta = (correct_after[both, j] - correct_before[both, j]).mean()
        assert c.change is not None and c.change.value == pytest.approx(delta)
        assert c.change.ci is not None and c.change.ci[0] <= delta <= c.change.ci[1]
    # Review changed some labels: some model's accuracy moved.
    assert any(c.change is not None and c.change.value != 0 for c in changes)


def test_refusals(factory: sessionmaker[Session], reviewed: Reviewed, tmp_path: Path) -> None:
    with transaction(factory) as s:
        bench = get_benchmark(s, "mmlu")
        ids = list(s.scalars(select(Instance.id).limit(2)))
        other = queues.create_queue(
            s, bench, ids, name="errata", label_name="errata", source="filter"
        )
        other_id = other.id
    with factory() as s:
        with pytest.raises(InvalidInput, match="reviews label set 'errata'; errata are about"):
            export_errata(s, "mmlu", tmp_path / "x", queue=other_id)
        with pytest.raises(InvalidInput, match="no such directory"):
            export_errata(s, "mmlu", tmp_path / "missing" / "x", queue=reviewed.queue_id)
    assert not (tmp_path / "x").exists()


def test_command_line(cli_store: object, reviewed: Reviewed, tmp_path: Path) -> None:
    out = tmp_path / "errata"
    args = ["export", "mmlu", str(out), "--errata", "--queue", str(reviewed.queue_id)]
    result = CliRunner().invoke(cli, [*args, "--resamples", "100"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("mmlu: 8 erratum row(s) from review queue")
    assert "1 item(s) not decided yet" in result.stdout
    assert "1 adjudicated to no label without a type" in result.stdout
    assert (out / REPORT_NAME).is_file()
    everything = CliRunner().invoke(cli, ["export", "mmlu", str(out), "--errata", "--all"])
    assert everything.exit_code == 0, everything.output
    assert everything.stdout.startswith("mmlu: 8 erratum row(s) from every review decision")
    neither = CliRunner().invoke(cli, ["export", "mmlu", str(out), "--errata"])
    assert neither.exit_code == 2 and "give --queue ID or --all" in neither.output


def _decision(value: str | None, reason: str = "", tags: tuple[str, ...] = ()) -> Resolution:
    event = Event(1, "adjudication", value, "rita", reason, tags, datetime(2024, 1, 1, tzinfo=UTC))
    return resolve(None, [], event, k=2)


@pytest.mark.parametrize(
    ("original", "value", "reason", "tags", "expected"),
    [
        ("A", "C", "", (), "wrong_groundtruth"),
        (None, "C", "", (), "wrong_groundtruth"),  # an unlabelled item gets its label
        ("A", "A", "", ("needs expertise", "bad options clarity"), "bad_options_clarity"),
        # The tag names choice queues offered before MMLU-Redux's own (stored events keep them).
        ("A", "A", "", ("needs expertise", "unclear options"), "bad_options_clarity"),
        ("A", "question unclear", "", ("unclear options",), "bad_options_clarity"),
        ("A", "A", "", ("needs expertise",), "expert"),
        ("A", "A", "", ("wrong reference",), "ok"),
        ("A", "question unclear", "", (), "bad_question_clarity"),
        ("A", None, "", ("unclear options", "no correct answer"), "no_correct_answer"),
        ("A", None, "", ("ambiguous",), None),
        ("A", "B", "fine after all. Error_Type = OK", (), "ok"),
    ],
)
def test_error_type_of_a_decision(
    original: str | None,
    value: str | None,
    reason: str,
    tags: tuple[str, ...],
    expected: str | None,
) -> None:
    assert error_type_of(original, _decision(value, reason, tags)) == expected


def test_an_unknown_explicit_error_type_is_refused() -> None:
    with pytest.raises(InvalidInput, match="the reason names error_type 'typo'; known: ok, "):
        error_type_of("A", _decision("A", "error_type: typo"))
