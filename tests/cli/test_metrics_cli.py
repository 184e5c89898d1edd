"""``appellate metrics`` / ``disagreements``: JSON keys and values, readable errors with exit 2."""

from __future__ import annotations

import json

import pytest
import typer
from sqlalchemy import make_url, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli.metrics import register
from app.db import transaction
from app.services.evidence.labels import append_label
from app.settings import Settings
from app.tables import Instance
from tests.metrics.test_service import _slice_items, build
from tests.support.registry_support import row_keys

# The keys rows had before the metric registry, and those of any metric registered since.
ROW_KEYS = {
    "detector", "slice", "n", "prevalence", "auroc", "auroc_ci", "auprc", "auprc_ci",
    "brier", "brier_ci", "choice_matched_auroc", "choice_matched_auroc_ci",
} | set(row_keys())  # fmt: skip
JUDGE_KEYS = {
    "judge", "pairs", "retained", "flips", "flip_rate", "flip_rate_ci", "accuracy_ab",
    "accuracy_both_orders", "agreement_flip", "agreement_nonflip",
}  # fmt: skip


@pytest.fixture
def cli() -> typer.Typer:
    """A bare app with the two commands, as ``app.cli`` registers them."""
    app = typer.Typer()
    register(app)
    return app


@pytest.fixture
def runner(cli_store: Settings, factory: sessionmaker[Session]) -> CliRunner:
    """A runner pointed at the test database, holding the sliced benchmark ``bench``."""
    with transaction(factory) as session:
        build(session, _slice_items())
    return CliRunner()


def test_metrics_json(runner: CliRunner, cli: typer.Typer) -> None:
    args = ["metrics", "bench", "--slice", "source", "--resamples", "200", "--seed", "5", "--json"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert {"benchmark", "label", "rows", "judges"} <= report.keys()
    assert (report["benchmark"], report["label"], report["positive"]) == ("bench", "reference", "A")
    assert [r["slice"] for r in report["rows"]] == [
        None,
        "mixed",
        "only-a",
        "only-b",
        "(macro-average)",
    ]
    assert all(set(row) == ROW_KEYS for row in report["rows"])
    whole = report["rows"][0]
    assert len(whole["auroc_ci"]) == 2 and whole["auroc_ci"][0] <= whole["auroc_ci"][1]
    assert report["rows"][2]["auroc"] is None  # one class: null, never 0.5
    (judge,) = report["judges"]
    assert set(judge) >= JUDGE_KEYS and judge["pairs"] == 24
    again = runner.invoke(cli, args)
    assert json.loads(again.stdout)["rows"] == report["rows"]  # seeded (and cached)


def test_metrics_table_output(runner: CliRunner, cli: typer.Typer) -> None:
    result = runner.invoke(cli, ["metrics", "bench", "--resamples", "50", "-d", "probe"])
    assert result.exit_code == 0, result.output
    assert "probe: n 24" in result.stdout and "judge judge: pairs 24" in result.stdout


def test_metrics_resolved_labels(
    runner: CliRunner, cli: typer.Typer, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as session:
        first = session.scalars(select(Instance).order_by(Instance.id)).first()
        assert first is not None
        # p00's original reference is B; a reviewer's adjudication makes it A.
        append_label(session, first.id, "reference", "A", source="adjudication", author="carol")
    args = ["metrics", "bench", "-d", "probe", "--resamples", "50"]
    original = json.loads(runner.invoke(cli, [*args, "--json"]).stdout)
    result = runner.invoke(cli, [*args, "--labels", "resolved", "--k", "3", "--json"])
    assert result.exit_code == 0, result.output
    resolved = json.loads(result.stdout)
    assert (original["labels"], resolved["labels"], resolved["k"]) == ("original", "resolved", 3)
    # One of 24 labels moved to the positive class.
    before, after = original["rows"][0]["prevalence"], resolved["rows"][0]["prevalence"]
    assert after - before == pytest.approx(1 / 24)
    table = runner.invoke(cli, [*args, "--labels", "resolved"])
    assert "bench against reference resolved (k = 2)" in table.stdout


def test_disagreements_json(runner: CliRunner, cli: typer.Typer) -> None:
    args = ["disagreements", "bench", "--detector", "probe", "--min-confidence", "0.6"]
    result = runner.invoke(cli, [*args, "--limit", "2", "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert found["mode"] == "threshold" and found["total"] >= 2 and len(found["items"]) == 2
    assert all(
        set(item) == {"external_id", "label", "score", "confidence", "reason"}
        for item in found["items"]
    )
    assert all(item["confidence"] >= 0.6 for item in found["items"])
    flips = runner.invoke(
        cli, ["disagreements", "bench", "-d", "judge", "--mode", "judge-orders", "--json"]
    )
    assert flips.exit_code == 0, flips.output
    assert json.loads(flips.stdout)["total"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["metrics", "nope"], "no benchmark named 'nope'"),
        (["metrics", "bench", "--label", "gold"], "no label set 'gold'"),
        (["metrics", "bench", "--detector", "ghost"], "no detector named 'ghost'"),
        (["metrics", "bench", "--labels", "latest"], "labels must be one of"),
        (["metrics", "bench", "--labels", "resolved", "--k", "0"], "k must be"),
        (["disagreements", "bench", "-d", "ghost"], "no detector named 'ghost'"),
        (["disagreements", "bench", "-d", "probe", "--mode", "vote"], "threshold"),
    ],
)
def test_errors_exit_2(runner: CliRunner, cli: typer.Typer, args: list[str], message: str) -> None:
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 2
    assert message in result.stderr and result.stdout == ""


def test_an_unknown_benchmark_names_the_store_without_its_password(
    runner: CliRunner, cli: typer.Typer, cli_store: Settings
) -> None:
    """Issue 21 item 11: a benchmark not found is most often a command run on another store."""
    result = runner.invoke(cli, ["metrics", "no-such-bench"])
    assert result.exit_code == 2
    url = make_url(cli_store.resolved_database_url)
    assert "no benchmark named 'no-such-bench'" in result.output
    assert f"(in the store {url.render_as_string(hide_password=True)})" in result.output
    if url.password:
        assert url.password not in result.output


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["metrics", "bench", "--detector", "ghost"], "detectors: "),
        (["disagreements", "bench", "-d", "ghost"], "detectors: "),
        (["metrics", "bench", "--label", "gold"], "label sets: "),
    ],
)
def test_an_unknown_name_lists_the_valid_ones(
    runner: CliRunner, cli: typer.Typer, factory: sessionmaker[Session], args: list[str], names: str
) -> None:
    """Issue 21 item 11: a typo is fixed from the error, without a command to list names."""
    result = runner.invoke(cli, args)
    assert result.exit_code == 2
    listed = result.stderr.split(names, 1)[1].split(" (in the store", 1)[0].split(", ")
    expected = ["judge", "probe"] if "detector" in names else ["reference"]
    assert set(expected) <= set(listed), result.stderr


def test_an_unknown_mode_is_named_before_anything_else(runner: CliRunner, cli: typer.Typer) -> None:
    """Issue 21 item 11: ``--mode bogus`` without ``-d`` said that ``-d`` was missing."""
    result = runner.invoke(cli, ["disagreements", "bench", "--mode", "bogus"])
    assert result.exit_code == 2
    assert "unknown mode 'bogus'" in result.output and "threshold" in result.output
    assert "Missing option" not in result.output
