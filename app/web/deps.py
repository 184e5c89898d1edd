"""Request dependencies: the opened store and the shared read cache; shared parameter types.

Both are ``async def``: FastAPI runs every plain ``def`` dependency in the thread pool, and
these only read ``app.state``. Routes open their one transaction themselves, inside the
single thread-pool hop of the (sync) route, and close it before rendering.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Form, Request

from app.sql.cache import VersionedCache
from app.store import Store


async def get_store(request: Request) -> Store:
    """The store opened at startup."""
    store: Store = request.app.state.store
    return store


async def read_cache(request: Request) -> VersionedCache:
    """The app's memo of facets and filtered counts."""
    cache: VersionedCache = request.app.state.read_cache
    return cache


StoreDep = Annotated[Store, Depends(get_store)]
ReadCache = Annotated[VersionedCache, Depends(read_cache)]
# A plain text field of a submitted form.
FormText = Annotated[str, Form()]
