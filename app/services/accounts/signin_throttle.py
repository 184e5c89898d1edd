"""The password sign-in throttle: attempts per (name, client address), counted in the store.

Every attempt is counted by one ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING`` *before* its
password is checked, so simultaneous guesses each get their own count and at most
:data:`MAX_FAILURES` of them are ever checked in a window; a correct password clears the count.
The counts live in the database, so every server process shares them. Keyed by client address
as well as name, guesses from one address never lock out the same name elsewhere: nobody can
lock someone else's account by guessing at it.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from sqlalchemy import case, delete, select
from sqlalchemy.orm import Session

from app.sql.dialect_insert import dialect_insert
from app.tables import LoginFailure, utcnow

MAX_FAILURES = 5
WINDOW = timedelta(minutes=5)
# The column's width; an IPv6 address with a zone fits.
_CLIENT_LENGTH: int = LoginFailure.__table__.c.client.type.length


def _key(name: str, client: str) -> dict[str, str]:
    # Hashed: any text (NUL, lone surrogates, megabytes) may be typed as a name.
    name_sha256 = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return {"name_sha256": name_sha256, "client": client[:_CLIENT_LENGTH]}


def admit(session: Session, name: str, client: str, *, now: datetime | None = None) -> bool:
    """Count one sign-in attempt of ``name`` from ``client``; whether its password may be checked.

    False once :data:`MAX_FAILURES` attempts of that name from that address were counted in the
    current :data:`WINDOW` (which starts at the first of them) without a success since.
    """
    now = now or utcnow()
    # Old windows are swept by whoever signs in; SKIP LOCKED (PostgreSQL) so that simultaneous
    # sweeps never wait on each other's rows, let alone deadlock.
    old = (
        select(LoginFailure.id)
        .where(LoginFailure.window_start < now - WINDOW)
        .with_for_update(skip_locked=True)
    )
    session.execute(delete(LoginFailure).where(LoginFailure.id.in_(old)))
    insert = dialect_insert(session, LoginFailure).values(
        **_key(name, client), attempts=1, window_start=now
    )
    expired = LoginFailure.window_start < now - WINDOW
    counted = session.execute(
        insert.on_conflict_do_update(
            index_elements=["name_sha256", "client"],
            set_={
                "attempts": case((expired, 1), else_=LoginFailure.attempts + 1),
                "window_start": case((expired, now), else_=LoginFailure.window_start),
            },
        ).returning(LoginFailure.attempts)
    ).scalar_one()
    return int(counted) <= MAX_FAILURES


def succeeded(session: Session, name: str, client: str) -> None:
    """Forget the attempts of ``name`` from ``client`` (its password was right)."""
    key = _key(name, client)
    session.execute(
        delete(LoginFailure).where(
            LoginFailure.name_sha256 == key["name_sha256"], LoginFailure.client == key["client"]
        )
    )
