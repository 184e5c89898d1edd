"""Commands that queue jobs build the kind's parameters first: a bad value is a usage error.

The error names the command's own option (exit 2) and nothing is queued; a good command
queues exactly the parameters the options say. Both databases.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.settings import Settings
from app.tables import Job
from tests.support import factories as f
from tests.support.job_targets import CHOICE, MODEL, seed_job_targets

BAD_OPTIONS = [
    (["judge", f.PAIRWISE, "--model", MODEL, "--batch-size", "0"], "--batch-size"),
    (["judge", f.PAIRWISE, "--model", MODEL, "--orders", "AB,CA"], "--orders"),
    (["extract", f.STATEMENTS, "--model", MODEL, "--position", "middle"], "--position"),
    (["extract", f.STATEMENTS, "--model", MODEL, "--layers", "1,two"], "--layers"),
    (["answer", CHOICE, "--model", MODEL, "--limit", "0"], "--limit"),
    (["rank-errors", CHOICE, "--ranker", "psychic"], "--ranker"),
    (["probe", "fit", f.PAIRWISE, "--judge", f.JUDGE, "--seed", "-1"], "--seed"),
    (["probe", "fit-lie", f.STATEMENTS, "--model", MODEL, "--name", " "], "--name"),
    (["probe", "fit-lie", f.STATEMENTS, "--model", MODEL, "--name", "p", "--layers", "x"],
     "--layers"),
    (["probe", "apply", f.JUDGE, f.STATEMENTS], "probe"),  # an argument
]  # fmt: skip


@pytest.fixture
def runner(cli_store: Settings, factory: sessionmaker[Session], tmp_path: Path) -> CliRunner:
    seed_job_targets(factory, tmp_path)
    return CliRunner()


def _jobs(factory: sessionmaker[Session]) -> list[Job]:
    with transaction(factory) as s:
        rows = list(s.scalars(select(Job).order_by(Job.id)))
        for row in rows:
            s.expunge(row)
        return rows


@pytest.mark.parametrize(("args", "option"), BAD_OPTIONS)
def test_a_bad_value_names_its_option_and_queues_nothing(
    runner: CliRunner, factory: sessionmaker[Session], args: list[str], option: str
) -> None:
    result = runner.invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {option}:" in result.output, result.output
    assert _jobs(factory) == []


def test_a_good_command_queues_its_options(
    runner: CliRunner, factory: sessionmaker[Session]
) -> None:
    result = runner.invoke(cli, ["judge", f.PAIRWISE, "--model", MODEL, "--limit", "3"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["rank-errors", CHOICE, "--ranker", "consensus"])
    assert result.exit_code == 0, result.output
    judge, rank = _jobs(factory)
    assert (judge.kind, judge.params["limit"], judge.params["mode"]) == ("judge", 3, "forced")
    assert (rank.kind, rank.params["rankers"]) == ("rank_errors", ["consensus"])
    with transaction(factory) as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 2
