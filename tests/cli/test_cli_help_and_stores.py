"""Every subcommand's help reads as plain text; a read command does not create a store.

Issue 21 item 11: help showed RST double backticks from docstrings and ``<bool>`` beside every
flag; a read command run in the wrong directory created an empty SQLite store there and then
reported that nothing was found in it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from app.cli import cli
from app.cli.lazy import LazyCommand


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """``path`` and the path of every subcommand below it (lazy ones loaded)."""
    if isinstance(command, LazyCommand):
        command = command.loaded
    yield path
    if hasattr(command, "list_commands"):
        ctx = command.context_class(command)
        for name in command.list_commands(ctx):
            yield from _commands(command.get_command(ctx, name), (*path, name))


COMMANDS = list(_commands(get_command(cli)))


def test_every_command_is_walked() -> None:
    # The root, its 16 commands and the subcommands of its groups (import, users, jobs, ...).
    assert len(COMMANDS) > 40
    assert ("import", "table") in COMMANDS and ("probe", "data", "build-truth") in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "appellate")
def test_help_has_no_rst_backticks_and_no_bool_type(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "--help" in result.output
    assert "``" not in result.output
    assert "<bool>" not in result.output


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data directory with no store in it (the SQLite default of the settings)."""
    data = tmp_path / "elsewhere"
    monkeypatch.delenv("APPELLATE_DATABASE_URL", raising=False)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(data))
    return data


READS = [
    ["metrics", "mmlu"],
    ["disagreements", "mmlu", "-d", "probe"],
    ["export", "mmlu", "out.csv"],
    ["jobs", "list"],
    ["users", "list"],
    ["models", "list"],
    ["probe", "list"],
]


@pytest.mark.parametrize("args", READS, ids=lambda a: " ".join(a[:2]))
def test_a_read_command_says_there_is_no_store_and_creates_none(
    elsewhere: Path, args: list[str]
) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    store = (elsewhere / "appellate.sqlite3").resolve()
    assert f"no store at {store}" in result.output
    assert not elsewhere.exists()


def test_creating_commands_still_create(elsewhere: Path) -> None:
    made = CliRunner().invoke(cli, ["db", "upgrade"])
    assert made.exit_code == 0, made.output
    assert (elsewhere / "appellate.sqlite3").is_file()
    listed = CliRunner().invoke(cli, ["jobs", "list"])
    assert listed.exit_code == 0, listed.output
    assert "no store" not in listed.output
