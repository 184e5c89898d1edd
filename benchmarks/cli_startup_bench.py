"""``appellate --help`` start-up time, this tree against a base revision, side by side.

The base revision is checked out into a temporary ``git worktree``; both trees run
``python -m app.cli --help`` with the same interpreter, in interleaved rounds (the order
rotates, so drift in the machine's load hits both alike), after one untimed run each that
writes the bytecode caches. Prints JSON: median and best seconds per tree, the ratio of the
medians, and whether both printed the same help.

    .venv/bin/python benchmarks/cli_startup_bench.py [--base REV] [--rounds N]

The default base is the commit before the one that made the commands lazy (the parent of the
commit that added ``app/cli/lazy.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rounds import run_rounds  # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["-m", "app.cli", "--help"]


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def default_base() -> str:
    """The parent of the commit that added ``app/cli/lazy.py`` (HEAD if none did yet)."""
    added = _git("log", "--diff-filter=A", "--format=%H", "--", "app/cli/lazy.py").split()
    return _git("rev-parse", f"{added[-1]}^") if added else _git("rev-parse", "HEAD")


def run_help(tree: Path) -> str:
    """What ``python -m app.cli --help`` prints in ``tree``."""
    # The tree's own ``app`` package, not the one the virtualenv has installed.
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "100", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, *COMMAND], cwd=tree, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def main() -> None:
    """Time both trees and print the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=None, help="Base revision (default: see above).")
    parser.add_argument("--rounds", type=int, default=10, help="Timed runs per tree.")
    args = parser.parse_args()
    base = _git("rev-parse", args.base or default_base())
    with tempfile.TemporaryDirectory(prefix="appellate-cli-bench-") as tmp:
        base_tree = Path(tmp) / "base"
        _git("worktree", "add", "--detach", str(base_tree), base)
        try:
            trees = {"base": base_tree, "current": ROOT}
            for tree in trees.values():
                run_help(tree)  # writes the bytecode caches
            methods = {name: lambda tree=tree: run_help(tree) for name, tree in trees.items()}
            seconds, _cpu, outputs = run_rounds(methods, args.rounds)
        finally:
            _git("worktree", "remove", "--force", str(base_tree))
    medians = {name: statistics.median(s) for name, s in seconds.items()}
    report = {
        "command": "python " + " ".join(COMMAND),
        "base": base,
        "current": f"working tree at {_git('rev-parse', 'HEAD')}",
        "rounds": args.rounds,
        "median_s": {name: round(m, 4) for name, m in medians.items()},
        "best_s": {name: round(min(s), 4) for name, s in seconds.items()},
        "speedup": round(medians["base"] / medians["current"], 2),
        "same_help": outputs["base"] == outputs["current"],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
