"""``appellate --help`` start-up time, this tree against a base revision, side by side.

What runs is the ``appellate`` command as a user runs it. This tree: the installed entry point
of its virtualenv (``.venv/bin/appellate``, an editable install of this tree; the report shows
where its ``app.cli`` was imported from). Base revision, checked out into a temporary
``git worktree``: a small executable wrapper named ``appellate`` (same interpreter, same
shebang launch) that puts the base tree first on ``sys.path`` and calls the entry point the
base's own ``pyproject.toml`` declares (``[project.scripts] appellate``, e.g.
``app.cli:main``), as its installed script would. Both run from the same empty folder, with the
same environment, in interleaved rounds (the order rotates, so drift in the machine's load
hits both alike), after one untimed run each that writes the bytecode caches.

Reference: the base revision's ``appellate --help``, measured the same way in the same run.

Prints JSON: median and best seconds per side, the ratio of the medians, and whether both
printed the same help once the command rows present on one side only (commands added or
removed between the revisions) are left out; those rows are listed. Rows are compared as
(command, summary): a summary's wrapping follows the width of the longest command name.

    .venv/bin/python benchmarks/cli_startup_bench.py [--base REV] [--rounds N]

The default base is the commit before the one that made the commands lazy: the parent of the
oldest commit that added ``app/lazy_cli.py`` or, after the move into ``app/cli/``,
``app/cli/lazy.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from rounds import run_rounds  # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
LAZY_MODULE = ("app/cli/lazy.py", "app/lazy_cli.py")
# Fixed width and no colour: both sides print the same layout.
ENV = {**os.environ, "COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1"}
ENV.pop("PYTHONPATH", None)
WRAPPER = """#!{python}
# The base revision's `appellate` entry point ({entry}), its tree first on sys.path.
import sys

sys.path.insert(0, {tree!r})
from {module} import {attribute}

if __name__ == "__main__":
    sys.exit({attribute}())
"""
_ROW = re.compile(r"^│ (\S+)\s+(.*?)\s*│$")
_MORE = re.compile(r"^│\s+(.*?)\s*│$")


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def default_base() -> str:
    """The parent of the oldest commit that added the lazy command group (either path).

    HEAD if none did yet.
    """
    added = _git("log", "--diff-filter=A", "--format=%H", "--", *LAZY_MODULE).split()
    return _git("rev-parse", f"{added[-1]}^") if added else _git("rev-parse", "HEAD")


def entry_point(tree: Path) -> str:
    """``module:attribute`` of the ``appellate`` script ``tree``'s ``pyproject.toml`` declares."""
    project = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
    return str(project["project"]["scripts"]["appellate"])


def write_wrapper(tree: Path, folder: Path) -> Path:
    """An executable ``appellate`` in ``folder`` that runs ``tree``'s entry point."""
    entry = entry_point(tree)
    module, attribute = entry.split(":")
    path = folder / "appellate"
    path.write_text(
        WRAPPER.format(
            python=sys.executable, entry=entry, tree=str(tree), module=module, attribute=attribute
        ),
        encoding="utf-8",
    )
    path.chmod(0o755)
    return path


def imported_from(python: str, first: Path | None, cwd: Path) -> str:
    """Where ``python`` imports ``app.cli`` from (with ``first`` put first on ``sys.path``)."""
    code = "import sys\n"
    if first is not None:
        code += f"sys.path.insert(0, {str(first)!r})\n"
    code += "import app.cli\nprint(app.cli.__file__)"
    done = subprocess.run(
        [python, "-c", code], cwd=cwd, env=ENV, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def run_help(command: Path, cwd: Path) -> str:
    """What ``command --help`` prints."""
    done = subprocess.run(
        [str(command), "--help"], cwd=cwd, env=ENV, capture_output=True, text=True, check=True
    )
    return done.stdout


def parse_help(text: str) -> tuple[list[str], dict[str, str]]:
    """The help's lines outside the Commands panel, and its rows: command -> one-line summary."""
    lines: list[str] = []
    rows: dict[str, str] = {}
    inside = False
    last: str | None = None
    for line in text.splitlines():
        if line.startswith("╭─ Commands"):
            inside = True
            lines.append(line)
            continue
        if inside and line.startswith("╰"):
            inside = False
        if not inside:
            lines.append(line.rstrip())
            continue
        if (row := _ROW.match(line)) is not None:
            last = row.group(1)
            rows[last] = row.group(2)
        elif (more := _MORE.match(line)) is not None and last is not None and more.group(1):
            rows[last] += " " + more.group(1)
    return lines, rows


def help_words(lines: list[str]) -> list[str]:
    """The words of help lines, without box drawing and the ``<bool>`` flag types.

    Typer 0.29 printed ``<bool>`` beside every flag; the CLI stopped showing it (issue 21), which
    rewraps the Options panel without changing what it says.
    """
    text = " ".join(lines).replace("<bool>", " ")
    return [word for word in text.split() if word.strip("│╭╮╰╯─")]


def compare_help(base: str, current: str) -> dict[str, object]:
    """Both helps without the command rows one side lacks: equal?, and those rows."""
    base_lines, base_rows = parse_help(base)
    current_lines, current_rows = parse_help(current)
    shared = [name for name in current_rows if name in base_rows]
    same_rows = [(n, base_rows[n]) for n in shared] == [(n, current_rows[n]) for n in shared]
    # Shared commands in the same order on both sides.
    same_order = [n for n in base_rows if n in current_rows] == shared
    return {
        "same_help": help_words(base_lines) == help_words(current_lines)
        and same_rows
        and same_order,
        "commands_compared": len(shared),
        "only_in_base": {n: s for n, s in base_rows.items() if n not in current_rows},
        "only_in_current": {n: s for n, s in current_rows.items() if n not in base_rows},
        "differing_rows": {
            n: {"base": base_rows[n], "current": current_rows[n]}
            for n in shared
            if base_rows[n] != current_rows[n]
        },
    }


def main() -> None:
    """Time both sides and print the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=None, help="Base revision (default: see above).")
    parser.add_argument("--rounds", type=int, default=10, help="Timed runs per side.")
    args = parser.parse_args()
    base = _git("rev-parse", args.base or default_base())
    installed = ROOT / ".venv" / "bin" / "appellate"
    if not installed.exists():
        parser.error(
            f"{installed} is missing: install this tree first (scripts/ensure_installed.sh)"
        )
    with tempfile.TemporaryDirectory(prefix="appellate-cli-bench-") as tmp:
        work = Path(tmp)
        base_tree, neutral = work / "base", work / "cwd"
        neutral.mkdir()
        _git("worktree", "add", "--detach", str(base_tree), base)
        try:
            commands = {"base": write_wrapper(base_tree, work), "current": installed}
            where = {
                "base": imported_from(sys.executable, base_tree, neutral),
                "current": imported_from(str(ROOT / ".venv" / "bin" / "python"), None, neutral),
            }
            for command in commands.values():
                run_help(command, neutral)  # writes the bytecode caches
            methods = {
                name: lambda command=command: run_help(command, neutral)
                for name, command in commands.items()
            }
            seconds, _cpu, outputs = run_rounds(methods, args.rounds)
            entry = entry_point(base_tree)
            trees = {"base": base_tree, "current": ROOT}
            for name, path in where.items():
                if not Path(path).is_relative_to(trees[name]):
                    raise RuntimeError(f"{name}: app.cli came from {path}, not {trees[name]}")
        finally:
            _git("worktree", "remove", "--force", str(base_tree))
    medians = {name: statistics.median(s) for name, s in seconds.items()}
    report = {
        "command": "appellate --help",
        "reference": f"base revision {base}: its pyproject entry point {entry}",
        "base": base,
        "current": f"{installed} (working tree at {_git('rev-parse', 'HEAD')})",
        "app_cli_imported_from": {
            name: str(Path(path).relative_to(trees[name])) for name, path in where.items()
        },
        "rounds": args.rounds,
        "median_s": {name: round(m, 4) for name, m in medians.items()},
        "best_s": {name: round(min(s), 4) for name, s in seconds.items()},
        "speedup": round(medians["base"] / medians["current"], 2),
        **compare_help(outputs["base"], outputs["current"]),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
