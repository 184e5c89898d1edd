"""Shared fixtures: a migrated database per dialect (SQLite file and PostgreSQL) and settings."""

from __future__ import annotations

import os
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app import migrate
from app.db import make_engine, session_factory
from app.settings import Settings
from app.tables import Base

# The per-file wall times at the end of each run (a conftest's hooks are its module's names).
from tests.support.file_durations import (  # noqa: F401
    pytest_runtest_logreport,
    pytest_terminal_summary,
)

# Each pytest-xdist worker gets its share of the cores for torch (and the job workers and CLIs
# it starts inherit it): two workers each running torch on every core of a two-core machine
# made the real-model tests wait on each other's spinning threads.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))
    os.environ.setdefault("APPELLATE_WORKER_THREADS", str(_share))


def pytest_configure(config: pytest.Config) -> None:
    """Apply the worker's thread share to torch if a plugin imported it before this file."""
    if "torch" in sys.modules and os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


# Tests of everything but the interval minimum run on a few groups: intervals for any number
# (tests of issue 21 item 9 pass Settings(min_interval_groups=...) explicitly).
os.environ.setdefault("APPELLATE_MIN_INTERVAL_GROUPS", "1")

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
DIALECTS = [
    d.strip()
    for d in os.environ.get("APPELLATE_TEST_DATABASES", "sqlite,postgresql").split(",")
    if d.strip()
]
PG_ADMIN_URL = os.environ.get(
    "APPELLATE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(autouse=True)
def _interval_minimum() -> Iterator[None]:
    """The process-wide interval minimum as it was before the test (a Store.open sets it)."""
    from app.stats import bootstrap

    before = bootstrap._min_interval_groups
    yield
    bootstrap._min_interval_groups = before


def _new_pg_database() -> str:
    """Create an empty PostgreSQL database for this test run and return its URL."""
    name = f"appellate_t_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def _drop_pg_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def empty_database_url(dialect: str, tmp_dir: Path) -> str:
    """A URL of a fresh, empty database of ``dialect`` (caller drops PostgreSQL ones)."""
    if dialect == "sqlite":
        return f"sqlite:///{tmp_dir / f'{uuid.uuid4().hex[:8]}.sqlite3'}"
    return _new_pg_database()


def one_dialect_of(preferred: str) -> str:
    """``preferred`` if this run tests that dialect, else the first one it does test."""
    return preferred if preferred in DIALECTS else DIALECTS[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the other dialects' copies of a test marked ``one_dialect(name)``.

    Such a test spends its time in a language model, not in the store: the store's part of it
    is covered on every dialect by faster tests, so a second copy would only cost a minute.
    """
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        mark = item.get_closest_marker("one_dialect")
        params = getattr(getattr(item, "callspec", None), "params", {})
        wanted = one_dialect_of(str(mark.args[0])) if mark is not None else None
        if wanted is not None and params.get("dialect", wanted) != wanted:
            dropped.append(item)
            continue
        keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session", params=DIALECTS)
def dialect(request: pytest.FixtureRequest) -> str:
    """Each database dialect the suite runs against."""
    return str(request.param)


@pytest.fixture(scope="session")
def _migrated(dialect: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    data_dir = tmp_path_factory.mktemp(f"data-{dialect}")
    url = empty_database_url(dialect, data_dir)
    settings = Settings(data_dir=data_dir, database_url=url)
    engine = make_engine(settings)
    migrate.upgrade(engine)
    engine.dispose()
    yield settings
    if dialect == "postgresql":
        _drop_pg_database(url)


@pytest.fixture
def settings(_migrated: Settings, tmp_path: Path) -> Settings:
    """Settings pointing at the migrated test database and a per-test data directory."""
    return _migrated.model_copy(update={"data_dir": tmp_path})


# How long the emptying TRUNCATE waits for another session's locks before it ends them.
TRUNCATE_LOCK_TIMEOUT = "20s"


def _used_tables(conn: Connection, tables: list[str]) -> list[str]:
    """Those of ``tables`` that hold a row or whose identity sequence has handed out an id.

    TRUNCATE costs ~6 ms per table however small (each gets a new file), 130 ms for the whole
    schema after every test; most tests touch a few tables. A table emptied by the test itself
    still counts when its ids moved on: the next test may expect them to start at 1 again.
    """
    probes = " UNION ALL ".join(
        f"SELECT '{name}' WHERE EXISTS (SELECT 1 FROM {name})" for name in tables
    )
    holding = set(conn.execute(text(probes)).scalars())
    advanced = set(
        conn.execute(
            text(
                "SELECT t.relname FROM pg_sequences s "
                "JOIN pg_class q ON q.relname = s.sequencename "
                "AND q.relnamespace = to_regnamespace(s.schemaname) "
                "JOIN pg_depend d ON d.objid = q.oid AND d.deptype IN ('a', 'i') "
                "JOIN pg_class t ON t.oid = d.refobjid "
                "WHERE s.schemaname = current_schema() AND s.last_value IS NOT NULL"
            )
        ).scalars()
    )
    return [name for name in tables if name in holding | advanced]


def truncate_pg(eng: Engine, tables: list[str], lock_timeout: str = TRUNCATE_LOCK_TIMEOUT) -> None:
    """Empty ``tables``; a session the test left behind is ended instead of waited for.

    A session left idle in a transaction (or a background thread of the test's app still
    reading) holds locks the TRUNCATE needs: without a timeout the teardown waits for ever (CI
    once stalled at 96% with the machine idle), and a reader can deadlock with it. The test is
    over, so any other session on its database is a leftover: it is ended, named in a warning.
    """
    for attempt in range(3):
        try:
            with eng.begin() as conn:
                conn.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout}'"))
                used = _used_tables(conn, tables)
                if used:
                    conn.execute(text(f"TRUNCATE {', '.join(used)} RESTART IDENTITY CASCADE"))
            return
        except OperationalError:
            if attempt == 2:
                raise
        with eng.begin() as conn:
            ended = conn.execute(
                text(
                    "SELECT pid, state, left(query, 200), pg_terminate_backend(pid) "
                    "FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid()"
                )
            ).all()
        if ended:
            warnings.warn(
                f"teardown ended sessions left on the test database: {ended}", stacklevel=1
            )
        time.sleep(0.5)


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    """An engine on the migrated database, emptied after each test."""
    eng = make_engine(settings)
    yield eng
    tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
    if eng.dialect.name == "postgresql":
        truncate_pg(eng, tables)
    else:
        with eng.begin() as conn:
            for name in tables:
                conn.execute(text(f"DELETE FROM {name}"))
    eng.dispose()


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct converted once per session into ``<data>/models/...`` (slow)."""
    from workers.engines.models import convert_smollm2

    return convert_smollm2(tmp_path_factory.mktemp("smollm2-data"))


@pytest.fixture(scope="session")
def tiny_model_dir(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-block Llama with SmolLM2's tokenizer and chat template, saved as safetensors.

    Real tokenization and templates at a cost of milliseconds per forward: the model for job,
    runner and kill/resume tests, where what it says does not matter.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir, local_files_only=True)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    out = tmp_path_factory.mktemp("tiny-model") / "tiny-llama"
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture
def factory(engine: Engine) -> sessionmaker[Session]:
    """A session factory on the test database."""
    return session_factory(engine)


@pytest.fixture
def cli_store(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``appellate`` commands run in this test read and write the test database."""
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    return settings
