"""``/healthz``: the process is up and the database answers."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel
from sqlalchemy import text

from app.db import transaction
from app.web.deps import StoreDep

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """Liveness and database reachability."""

    status: str
    database: str


@router.get("/healthz")
def healthz(store: StoreDep) -> Health:
    """``ok`` when a trivial query succeeds; a database error answers 500."""
    with transaction(store.factory) as session:
        session.execute(text("SELECT 1"))
    return Health(status="ok", database=store.engine.dialect.name)
