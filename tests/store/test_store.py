"""Settings, engine pragmas, transactions and concurrent writers on the real databases."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.db import make_engine, session_factory, transaction
from app.settings import Settings
from app.store import Store
from app.tables import Benchmark, Instance, LabelEvent


def test_default_database_is_a_sqlite_file_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("APPELLATE_DATABASE_URL", raising=False)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(tmp_path / "d"))
    settings = Settings()
    assert (
        settings.resolved_database_url
        == f"sqlite:///{(tmp_path / 'd').resolve()}/appellate.sqlite3"
    )
    store = Store.open(settings)
    try:
        assert (tmp_path / "d" / "appellate.sqlite3").is_file()
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        store.close()


def test_sqlite_pragmas(tmp_path: Path) -> None:
    engine = make_engine(Settings(data_dir=tmp_path, sqlite_busy_timeout_ms=12_345))
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 12_345
    engine.dispose()


def test_foreign_keys_are_enforced(factory: sessionmaker[Session]) -> None:
    with pytest.raises(IntegrityError), transaction(factory) as session:
        session.add(Instance(benchmark_id=999_999, external_id="x", group_key="g", payload={}))
        session.flush()


def test_transaction_rolls_back_on_error(factory: sessionmaker[Session]) -> None:
    with pytest.raises(RuntimeError), transaction(factory) as session:
        session.add(Benchmark(name="b", kind="statement"))
        session.flush()
        raise RuntimeError("boom")
    with transaction(factory) as session:
        assert session.scalar(select(func.count()).select_from(Benchmark)) == 0


def _writer(url: str, data_dir: str, instance_id: int, author: str, n: int) -> None:
    factory = session_factory(make_engine(Settings(data_dir=Path(data_dir), database_url=url)))
    for i in range(n):
        with transaction(factory) as session:
            session.add(
                LabelEvent(
                    instance_id=instance_id,
                    label_name="l",
                    value=str(i),
                    source="test",
                    author=author,
                )
            )


def test_two_processes_write_side_by_side(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    # The web server and a worker are separate processes writing to one store.
    with transaction(factory) as session:
        bench = Benchmark(name="b", kind="statement")
        session.add(bench)
        session.flush()
        inst = Instance(benchmark_id=bench.id, external_id="1", group_key="1", payload={})
        session.add(inst)
        session.flush()
        iid = inst.id
    ctx = mp.get_context("spawn")
    url = settings.resolved_database_url
    procs = [
        ctx.Process(target=_writer, args=(url, str(settings.data_dir), iid, f"w{k}", 150))
        for k in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    with transaction(factory) as session:
        counts = dict(
            session.execute(
                select(LabelEvent.author, func.count()).group_by(LabelEvent.author)
            ).all()
        )
    assert counts == {"w0": 150, "w1": 150}


def test_postgresql_sessions_run_without_jit(engine: object, dialect: str) -> None:
    if dialect != "postgresql":
        # SQLite has no JIT; the pragmas test covers its connection set-up.
        assert engine.dialect.name == "sqlite"  # type: ignore[attr-defined]
        return
    with engine.connect() as conn:  # type: ignore[attr-defined]
        assert conn.exec_driver_sql("SHOW jit").scalar() == "off"
