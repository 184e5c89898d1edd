"""One default label set rule: a benchmark without ``reference`` gets the same one everywhere.

Before the rule lived in the domain, the CLI compared with ``reference`` (and found no labels)
while the pages took the benchmark's first label set.
"""

from __future__ import annotations

import json

import pytest
import typer
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli.metrics import register
from app.db import transaction
from app.services.evidence.labels import default_label_set
from app.services.review.review_views import queue_form
from app.services.table.facets import describe_benchmark
from app.settings import Settings
from app.web.benchmark_params import default_label
from tests.metrics.test_service import build

# Label sets named so that sorted order ("gold") differs from insertion order ("zeta" first).
ITEMS = [
    {
        "id": f"q{i}",
        "group": f"g{i // 2}",
        "labels": {"zeta": "B" if i % 3 else "A", "gold": "A" if i % 2 else "B"},
        "scores": {"probe": (i % 7) / 7},
    }
    for i in range(24)
]


@pytest.mark.parametrize(
    ("names", "asked", "chosen"),
    [
        (["gold", "reference"], None, "reference"),
        (["zeta", "gold"], None, "gold"),
        ([], None, "reference"),
        (["zeta", "gold"], "zeta", "zeta"),
        (["reference"], "", "reference"),
    ],
)
def test_the_rule(names: list[str], asked: str | None, chosen: str) -> None:
    assert default_label_set(names, asked) == chosen


@pytest.fixture
def runner(cli_store: Settings, factory: sessionmaker[Session]) -> CliRunner:
    with transaction(factory) as session:
        build(session, ITEMS, name="nameless")
    return CliRunner()


def test_every_surface_picks_the_same_label_set(
    runner: CliRunner, factory: sessionmaker[Session]
) -> None:
    cli = typer.Typer()
    register(cli)
    metrics = runner.invoke(cli, ["metrics", "nameless", "--resamples", "20", "--json"])
    assert metrics.exit_code == 0, metrics.output
    report = json.loads(metrics.stdout)
    assert report["label"] == "gold"
    assert report["rows"] and report["rows"][0]["n"] == len(ITEMS)
    listed = runner.invoke(cli, ["disagreements", "nameless", "-d", "probe", "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout)["label"] == "gold"
    with transaction(factory) as session:
        # What the metrics and disagreements pages preselect, and the new-queue form.
        assert default_label(describe_benchmark(session, "nameless"), None) == "gold"
        assert queue_form(session, "nameless", "filter").label == "gold"
        assert queue_form(session, "nameless", "filter", "zeta").label == "zeta"
