"""The demo data set: which bundled files the demo imports, each in its own transaction."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import select

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.ingest.mmlu_redux import import_mmlu_redux
from app.ingest.statements import import_statements
from app.services.accounts.users import create_user, issue_token
from app.services.evidence.benchmarks import get_benchmark
from app.services.metrics.rankers import DETAILS_KEY as RANKERS_KEY
from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers
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
    yield from _load_mmlu_redux(store, data / "mmlu-redux")


MMLU_BENCHMARK = "mmlu-redux"


def _load_mmlu_redux(store: Store, folder: Path) -> Iterator[str]:
    """MMLU-Redux with its models' answers, then the label-error rankers (when new)."""
    if not folder.is_dir():
        return
    with transaction(store.factory) as session:
        summary = import_mmlu_redux(session, [folder], MMLU_BENCHMARK)
        ranked = RANKERS_KEY in (get_benchmark(session, MMLU_BENCHMARK).details or {})
    yield summary.line()
    if ranked and summary.added == 0:
        return
    # Read, rank without a session, write: the same steps as the rank_errors job.
    with transaction(store.factory) as session:
        inputs = rank_inputs(session, MMLU_BENCHMARK)
    result = compute_rankers(inputs)
    with transaction(store.factory) as session:
        stored = store_rankers(session, inputs, result)
    scored = ", ".join(f"{name} AUPRC {q['auprc']:.3f}" for name, q in stored["rankers"].items())
    yield f"{MMLU_BENCHMARK}: rankers {scored}; default {stored['default']}"


DEMO_ADMIN = "admin"


def demo_admin_link(store: Store) -> str:
    """The secret of a one-time sign-in link for the demo's admin (created on first run)."""
    with transaction(store.factory) as session:
        user = session.scalar(select(User).where(User.name == DEMO_ADMIN))
        if user is None:
            user = create_user(session, DEMO_ADMIN, Role.admin.value)
        secret, _ = issue_token(session, user, TokenKind.signin, label="demo")
    return secret
