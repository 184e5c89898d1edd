"""``appellate``: every command listed without importing it, loaded when it runs, same help."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from app.cli import COMMANDS, cli
from app.cli.lazy import Lazy, LazyCommand, LazyGroup

REPO = Path(__file__).resolve().parents[2]


def _first_paragraph(text: str) -> str:
    return " ".join(inspect.cleandoc(text).split("\n\n")[0].split())


def _help(app: typer.Typer, *args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_is_listed_in_order_as_a_placeholder() -> None:
    group = get_command(cli)
    assert isinstance(group, LazyGroup)
    assert list(group.commands) == [c.name for c in COMMANDS]
    assert all(isinstance(c, LazyCommand) for c in group.commands.values())
    assert {"judge", "extract", "worker", "jobs", "models", "probe"} <= set(group.commands)


@pytest.mark.parametrize("entry", COMMANDS, ids=[c.name for c in COMMANDS])
def test_the_listed_summary_is_the_commands_own(entry: Lazy) -> None:
    placeholder = get_command(cli).commands[entry.name]
    loaded = placeholder.loaded
    assert not isinstance(loaded, LazyCommand) and loaded.name == entry.name
    assert loaded.help and _first_paragraph(loaded.help) == _first_paragraph(entry.summary)


def test_the_listing_reads_as_with_every_command_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    lazy = _help(cli)
    add = LazyGroup.add_command

    def eager(self: LazyGroup, cmd: object, name: str | None = None) -> None:
        add(self, cmd.loaded if isinstance(cmd, LazyCommand) else cmd, name)

    monkeypatch.setattr(LazyGroup, "add_command", eager)
    assert not any(isinstance(c, LazyCommand) for c in get_command(cli).commands.values())
    assert _help(cli) == lazy
    for entry in COMMANDS:
        assert entry.name in lazy


def test_subcommands_show_their_own_options_and_run() -> None:
    judge = _help(cli, "judge")
    assert "--reasoning-tokens" in judge and "--base-url" in judge
    jobs = _help(cli, "jobs")
    assert all(name in jobs for name in ("list", "show", "cancel", "retry"))
    assert "build-truth" in _help(cli, "probe", "data")
    missing = CliRunner().invoke(cli, ["judgee"])
    assert missing.exit_code == 2 and "No such command" in missing.output


def test_a_command_module_loads_only_when_its_command_runs() -> None:
    script = """
import sys
from typer.testing import CliRunner
from app.cli import cli
runner = CliRunner()
assert runner.invoke(cli, ["--help"]).exit_code == 0
before = sorted(m for m in sys.modules if m.split(".")[0] in ("workers", "torch", "sklearn"))
assert runner.invoke(cli, ["jobs", "--help"]).exit_code == 0
print(before, "workers.cli.jobs" in sys.modules)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True"]
