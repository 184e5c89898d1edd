"""The password sign-in throttle: attempts per (name, client address) and per name, in the store.

Every attempt is counted by one ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING`` *before* its
password is checked, so simultaneous guesses each get their own count; a correct password clears
the count of its address. The counts live in the database, so every server process shares them.

Two counts, two purposes:

- Per name and client address: at most :data:`MAX_FAILURES` attempts in :data:`WINDOW`. Guesses
  from one address never lock out the same name elsewhere.
- Per name, whatever the address (issue 21 item 18): at most :data:`ACCOUNT_MAX_FAILURES`
  password checks in :data:`ACCOUNT_WINDOW`, so guesses spread over many addresses (a botnet,
  or a spoofed ``X-Forwarded-For`` behind a misconfigured proxy) get no more checks than a few
  addresses would. Only attempts that the per-address count admitted are counted here, so one
  address hammering a name spends at most :data:`MAX_FAILURES` of it.

The account-wide lockout is deliberately short (one minute, from its first attempt): someone who
keeps guessing at a name can keep its password sign-in refused while they persist, but never
longer than a minute after they stop, and one-time sign-in links and API tokens are not
throttled, so an administrator can always let the real person in. A longer window would make
that denial of service cheaper; a higher count, guessing cheaper.
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
ACCOUNT_MAX_FAILURES = 10
ACCOUNT_WINDOW = timedelta(minutes=1)
# The client key of a name's account-wide count. Not an address; were a client ever reported
# under this name, its attempts would count twice in one row: stricter, never looser.
ACCOUNT = "(any address)"
# The column's width; an IPv6 address with a zone fits.
_CLIENT_LENGTH: int = LoginFailure.__table__.c.client.type.length

ADDRESS_REFUSAL = "Too many failed sign-ins for this name; try again in a few minutes."
ACCOUNT_REFUSAL = (
    "Too many failed sign-ins for this name from several places; password sign-in for it is "
    "paused for a minute. Try again then, or use a sign-in link from an administrator."
)


def _key(name: str, client: str) -> dict[str, str]:
    # Hashed: any text (NUL, lone surrogates, megabytes) may be typed as a name.
    name_sha256 = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return {"name_sha256": name_sha256, "client": client[:_CLIENT_LENGTH]}


def _count(session: Session, key: dict[str, str], window: timedelta, now: datetime) -> int:
    """Count one attempt under ``key``; the attempts counted in its current window."""
    insert = dialect_insert(session, LoginFailure).values(**key, attempts=1, window_start=now)
    expired = LoginFailure.window_start < now - window
    counted = session.execute(
        insert.on_conflict_do_update(
            index_elements=["name_sha256", "client"],
            set_={
                "attempts": case((expired, 1), else_=LoginFailure.attempts + 1),
                "window_start": case((expired, now), else_=LoginFailure.window_start),
            },
        ).returning(LoginFailure.attempts)
    ).scalar_one()
    return int(counted)


def refusal(session: Session, name: str, client: str, *, now: datetime | None = None) -> str | None:
    """Count one sign-in attempt of ``name`` from ``client``; why it is refused, or None.

    Refused (:data:`ADDRESS_REFUSAL`) once :data:`MAX_FAILURES` attempts of that name from that
    address were counted in the current :data:`WINDOW` without a success since; else refused
    (:data:`ACCOUNT_REFUSAL`) once :data:`ACCOUNT_MAX_FAILURES` admitted attempts of that name
    from any address were counted in the current :data:`ACCOUNT_WINDOW`. Each window starts
    at the first attempt it counts.
    """
    now = now or utcnow()
    # Old windows are swept by whoever signs in; SKIP LOCKED (PostgreSQL) so that simultaneous
    # sweeps never wait on each other's rows, let alone deadlock. WINDOW is the longer one:
    # an account row older than its own window is reset by _count when next used.
    old = (
        select(LoginFailure.id)
        .where(LoginFailure.window_start < now - max(WINDOW, ACCOUNT_WINDOW))
        .with_for_update(skip_locked=True)
    )
    session.execute(delete(LoginFailure).where(LoginFailure.id.in_(old)))
    if _count(session, _key(name, client), WINDOW, now) > MAX_FAILURES:
        return ADDRESS_REFUSAL
    if _count(session, _key(name, ACCOUNT), ACCOUNT_WINDOW, now) > ACCOUNT_MAX_FAILURES:
        return ACCOUNT_REFUSAL
    return None


def admit(session: Session, name: str, client: str, *, now: datetime | None = None) -> bool:
    """Count one sign-in attempt of ``name`` from ``client``; whether its password may be checked.

    See :func:`refusal`.
    """
    return refusal(session, name, client, now=now) is None


def succeeded(session: Session, name: str, client: str) -> None:
    """Forget the attempts of ``name`` from ``client`` (its password was right).

    The account-wide count is kept: it bounds the password checks of a name per minute, the
    right one included, and a success in the middle of someone else's guessing must not hand
    them a fresh allowance.
    """
    key = _key(name, client)
    session.execute(
        delete(LoginFailure).where(
            LoginFailure.name_sha256 == key["name_sha256"], LoginFailure.client == key["client"]
        )
    )
