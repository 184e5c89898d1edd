"""Every Alembic revision goes up and down on both dialects, and head matches the ORM tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from app import migrate
from app.db import make_engine
from app.settings import Settings
from app.tables import Base
from tests.conftest import _drop_pg_database, empty_database_url


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
