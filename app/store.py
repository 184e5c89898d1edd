"""The opened store: settings, engine and session factory, migrated to head on open."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app import migrate
from app.db import immediate, make_engine, session_factory
from app.settings import Settings


@dataclass(frozen=True)
class Store:
    """Everything a request, job step or CLI command needs to open a transaction."""

    settings: Settings
    engine: Engine
    factory: sessionmaker[Session]

    @classmethod
    def open(cls, settings: Settings, *, upgrade: bool = True) -> Store:
        """Connect to the configured database, applying pending migrations unless told not to."""
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        # Every process that computes intervals (server, CLI, worker) opens its store here;
        # imported here, as numpy is, only by a process that opens one.
        from app.stats import bootstrap

        bootstrap.set_min_interval_groups(settings.min_interval_groups)
        engine = make_engine(settings)
        if upgrade:
            migrate.upgrade(engine)
        return cls(settings=settings, engine=engine, factory=session_factory(engine))

    @property
    def write_factory(self) -> sessionmaker[Session]:
        """Sessions for transactions that write beside other writers (see ``db.immediate``)."""
        return session_factory(immediate(self.engine))

    def close(self) -> None:
        """Release pooled connections."""
        self.engine.dispose()
