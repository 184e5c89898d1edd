"""The demo data set: which bundled files the demo imports, each in its own transaction."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import select

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.ingest.statements import import_statements
from app.services.users import create_user, issue_token
from app.settings import BUNDLED_DATA
from app.store import Store
from app.tables import Role, TokenKind, User


def demo_files(data: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """JudgeBench pair files, JudgeBench judge-output files and statement CSVs under ``data``."""
    jb = data / "judgebench"
    pairs = sorted(jb.glob("dataset=judgebench,response_model=*.jsonl"))
    outputs = sorted((jb / "outputs").glob("*.jsonl"))
    truth = data / "truth"
    statements = [
        *sorted(truth.glob("*.csv")),
        truth / "real_world_scenarios" / "all_unambiguous_replies.csv",
    ]
    return pairs, outputs, statements


def load_demo_data(store: Store, data: Path = BUNDLED_DATA) -> Iterator[str]:
    """Import the bundled data (idempotent: rerunning adds nothing); yield one line per file."""
    pairs, outputs, statements = demo_files(data)
    if not pairs:
        raise FileNotFoundError(f"{data}: no JudgeBench pair files found")
    with transaction(store.factory) as session:
        summary = import_judgebench(session, pairs, outputs=outputs, benchmark="judgebench")
    yield summary.line()
    # One statement benchmark with the file stem as its `dataset` slice; the role-play replies
    # are a separate lie-detection benchmark.
    for path in statements:
        name = "real-world-scenarios" if path.parent.name == "real_world_scenarios" else "truth"
        with transaction(store.factory) as session:
            summary = import_statements(session, path, benchmark=name)
        yield summary.line()


DEMO_ADMIN = "admin"


def demo_admin_link(store: Store) -> str:
    """The secret of a one-time sign-in link for the demo's admin (created on first run)."""
    with transaction(store.factory) as session:
        user = session.scalar(select(User).where(User.name == DEMO_ADMIN))
        if user is None:
            user = create_user(session, DEMO_ADMIN, Role.admin.value)
        secret, _ = issue_token(session, user, TokenKind.signin, label="demo")
    return secret
