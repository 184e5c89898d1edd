"""A mode module holds its ranking; every read of the store goes through its input.

Checked on each mode module's source: it imports no SQLAlchemy, touches no ``session``, and
every function it imports takes no session (the reads are :class:`ModeInput` methods).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

import app.services.disagreements.modes as modes_package
from app.services.disagreements.modes import all_modes
from app.services.disagreements.modes.inputs import ModeInput

# The package's modules that are not modes: the declarations, the input, the previews.
NOT_MODES = {"__init__", "base", "inputs", "previews"}
MODE_FILES = sorted(
    p for p in Path(modes_package.__file__).parent.glob("*.py") if p.stem not in NOT_MODES
)


def _takes_a_session(obj: object) -> bool:
    if not callable(obj) or isinstance(obj, type):
        return False
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    return any(
        p.name == "session" or p.annotation in (Session, "Session")
        for p in signature.parameters.values()
    )


def reads_outside_the_input(path: Path) -> list[str]:
    """What ``path`` does that a mode may not: SQLAlchemy, a session, a function reading one."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names]
            if any(n.split(".")[0] == "sqlalchemy" for n in names):
                found.append(f"line {node.lineno}: imports sqlalchemy")
            if isinstance(node, ast.ImportFrom) and node.module:
                source = importlib.import_module(node.module)
                for alias in node.names:
                    if _takes_a_session(getattr(source, alias.name, None)):
                        found.append(f"line {node.lineno}: imports {alias.name}, which reads")
        if isinstance(node, ast.Attribute) and node.attr == "session":
            found.append(f"line {node.lineno}: reads .session")
        if isinstance(node, ast.Name) and node.id == "session":
            found.append(f"line {node.lineno}: uses a session")
    return found


def test_every_registered_mode_lives_in_a_mode_file() -> None:
    files = {p.stem for p in MODE_FILES}
    assert {type(m).__module__.rsplit(".", 1)[1] for m in all_modes()} == files


@pytest.mark.parametrize("path", MODE_FILES, ids=lambda p: p.stem)
def test_a_mode_reads_only_through_its_input(path: Path) -> None:
    assert reads_outside_the_input(path) == []


def test_the_check_refuses_a_mode_that_reads_the_store(tmp_path: Path) -> None:
    """The check can fail: a mode written the old way (reads with its own session) is caught."""
    source = Path(modes_package.__file__).parent / "margin.py"
    text = source.read_text()
    text = text.replace(
        "scores = inp.scores(detector)",
        "scores = benchmark_probabilities(inp.session, inp.bench, detector)",
    )
    text = text.replace(
        "from app.services.disagreements.modes import base\n",
        "from sqlalchemy import select\n\nfrom app.services.disagreements.modes import base\n"
        "from app.services.disagreements.modes.inputs import benchmark_probabilities\n",
    )
    bad = tmp_path / "margin.py"
    bad.write_text(text)
    found = reads_outside_the_input(bad)
    assert any("sqlalchemy" in f for f in found)
    assert any(".session" in f for f in found)
    assert any("benchmark_probabilities" in f for f in found)


def test_the_input_offers_every_read_the_modes_make() -> None:
    reads = {"probabilities", "others_against_label", "scores", "judgments", "answers",
             "items_info", "require_detector"}  # fmt: skip
    assert reads <= {name for name, _ in inspect.getmembers(ModeInput, inspect.isfunction)}
