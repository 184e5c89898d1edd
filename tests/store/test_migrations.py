"""Every Alembic revision goes up and down on both dialects, and head matches the ORM tables."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from app import migrate
from app.db import make_engine
from app.natural_sort import natural_key
from app.settings import Settings
from app.tables import Base
from tests.conftest import _drop_pg_database, empty_database_url

VERSIONS = Path(migrate.__file__).resolve().parent.parent / "migrations" / "versions"


@pytest.fixture
def empty_settings(dialect: str, tmp_path: Path) -> Settings:
    url = empty_database_url(dialect, tmp_path)
    yield Settings(data_dir=tmp_path, database_url=url)
    if dialect == "postgresql":
        _drop_pg_database(url)


def _revisions() -> list[str]:
    script = ScriptDirectory.from_config(migrate.alembic_config())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def test_each_revision_up_and_down(empty_settings: Settings) -> None:
    engine = make_engine(empty_settings)
    revisions = _revisions()
    assert revisions, "no migrations found"
    for rev in revisions:
        migrate.upgrade(engine, rev)
        with engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == rev
    for rev in reversed(revisions):
        with engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == rev
        migrate.downgrade(engine, "-1")
    names = set(inspect(engine).get_table_names()) - {"alembic_version"}
    assert names == set()
    # And up again: downgrades must leave a database that upgrades cleanly.
    migrate.upgrade(engine)
    assert {t.name for t in Base.metadata.sorted_tables} <= set(inspect(engine).get_table_names())
    engine.dispose()


def test_head_matches_models(empty_settings: Settings) -> None:
    engine = make_engine(empty_settings)
    migrate.upgrade(engine)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, Base.metadata)
    engine.dispose()
    assert diff == [], f"models and migrations differ: {diff}"


def test_upgrading_a_populated_store_keeps_every_row(empty_settings: Settings) -> None:
    """A store made by the oldest revision, with rows, upgrades to head and back keeping them.

    A migration that rebuilds a parent table (SQLite batch mode) must not cascade-delete, and
    one that fills a new column from old rows (0006's sort key) must fill it.
    """
    engine = make_engine(empty_settings)
    oldest = _revisions()[0]
    migrate.upgrade(engine, oldest)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO benchmarks (id, name, kind, description, source, licence, "
                "data_version, created_at) VALUES (1, 'b', 'pairwise', '', '', '', 1, "
                "CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO instances (id, benchmark_id, external_id, group_key, payload, "
                "created_at) VALUES (1, 1, 'x:10', 'g', '{}', CURRENT_TIMESTAMP), "
                "(2, 1, 'x:2', 'g', '{}', CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO label_events (instance_id, label_name, value, source, author, "
                "reason, tags, created_at) VALUES (1, 'reference', 'A', 'import', '', '', '[]', "
                "CURRENT_TIMESTAMP)"
            )
        )
    counted = ("benchmarks", "instances", "label_events")

    def counts() -> dict[str, int]:
        with engine.connect() as conn:
            return {
                t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in counted
            }

    before = counts()
    assert before == {"benchmarks": 1, "instances": 2, "label_events": 1}
    migrate.upgrade(engine)
    assert counts() == before
    with engine.connect() as conn:
        by_key = conn.execute(text("SELECT external_id FROM instances ORDER BY sort_key")).all()
    assert [row[0] for row in by_key] == ["x:2", "x:10"]
    migrate.downgrade(engine, oldest)
    assert counts() == before
    if engine.dialect.name == "sqlite":
        # Foreign keys are enforced again on the pooled connections afterwards.
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
    engine.dispose()


def test_revisions_import_nothing_from_the_application() -> None:
    # A revision that imports app code changes what it does when that code changes later; each
    # carries its own copy of what it computes (only migrations/env.py wires in the app).
    offenders = []
    for path in sorted(VERSIONS.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}" for n in names if n.split(".")[0] in {"app", "workers"}
            ]
    assert len(list(VERSIONS.glob("*.py"))) >= 11
    assert not offenders, f"revisions import application code: {offenders}"


def test_0006_key_is_still_the_application_key() -> None:
    # 0006 keeps its own copy of the key. If the application's key changes, stores migrated by
    # 0006 hold the old one: that change needs a new revision recomputing instances.sort_key.
    spec = importlib.util.spec_from_file_location("rev_0006", VERSIONS / "0006_natural_sort_key.py")
    assert spec is not None and spec.loader is not None
    revision = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(revision)
    ids = ["x:10", "x:2", "q007", "a" * 1200, "9" * 250, "", "b:01:3", "ü12"]
    assert [revision.natural_key(i) for i in ids] == [natural_key(i) for i in ids]
