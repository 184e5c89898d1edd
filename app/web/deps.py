"""Request dependencies: one session (one transaction) per request, and the shared read cache."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.db import transaction
from app.services.cache import VersionedCache
from app.store import Store


def db_session(request: Request) -> Iterator[Session]:
    """The request's session: its transaction commits after the route, rolls back on error."""
    store: Store = request.app.state.store
    with transaction(store.factory) as session:
        yield session


def read_cache(request: Request) -> VersionedCache:
    """The app's memo of facets and filtered counts."""
    cache: VersionedCache = request.app.state.read_cache
    return cache


DbSession = Annotated[Session, Depends(db_session)]
ReadCache = Annotated[VersionedCache, Depends(read_cache)]
