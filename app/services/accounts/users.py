"""Users, argon2 password hashes and bearer secrets (browser sessions, API tokens, sign-in links).

A secret is shown once, when it is issued; the database keeps only its SHA-256, so reading the
database (or a backup of it) signs nobody in.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.errors import Conflict, InvalidInput
from app.sql.lookup import added, get_one
from app.tables import AuthToken, Role, TokenKind, User, as_utc, utcnow

SESSION_TTL = timedelta(days=14)
SIGNIN_TTL = timedelta(hours=24)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$")
_HASHER = PasswordHasher()
# Verified when a name is unknown, so a wrong name costs as long as a wrong password.
_DUMMY_HASH = _HASHER.hash(secrets.token_urlsafe(16))
MIN_PASSWORD = 8


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as, detached from any session.

    ``csrf_token`` is set for browser sessions only: requests authenticated by a bearer token
    carry no ambient credential, so they need no CSRF token.
    """

    user_id: int
    name: str
    role: Role
    token_id: int
    csrf_token: str | None = None

    def can(self, role: Role) -> bool:
        """Whether this user holds ``role`` or a higher one."""
        return self.role.rank >= role.rank


def check_role(role: str) -> Role:
    """``role`` as a Role, else InvalidInput naming the allowed values."""
    try:
        return Role(role)
    except ValueError:
        allowed = ", ".join(r.value for r in Role)
        raise InvalidInput(f"unknown role {role!r} (one of {allowed})", field="role") from None


def hash_password(password: str) -> str:
    """An argon2id hash of ``password`` (at least :data:`MIN_PASSWORD` characters)."""
    if len(password) < MIN_PASSWORD:
        raise InvalidInput(
            f"the password must have at least {MIN_PASSWORD} characters", field="password"
        )
    return _HASHER.hash(password)


def create_user(session: Session, name: str, role: str, password: str | None = None) -> User:
    """Add a user; without a password they sign in through links only.

    Raises
    ------
    InvalidInput
        A malformed name, an unknown role or a short password.
    Conflict
        The name is taken.

    """
    if not _NAME.match(name):
        raise InvalidInput(
            f"user name {name!r} must be 1-100 letters, digits or _ . @ - "
            "and start with a letter or digit",
            field="name",
        )
    checked = check_role(role)
    if session.scalar(select(User.id).where(User.name == name)) is not None:
        raise Conflict(f"user {name!r} already exists")
    user = User(
        name=name,
        role=checked.value,
        password_hash=hash_password(password) if password is not None else None,
        active=True,
    )
    return added(session, user)


def get_user(session: Session, name: str) -> User:
    """The user called ``name``, else NotFound."""
    return get_one(session, User, f"no user {name!r}", name=name)


def user_of(session: Session, principal: Principal) -> User:
    """The user row ``principal`` acts as."""
    return get_one(session, User, f"no user {principal.name!r}", id=principal.user_id)


def set_role(
    session: Session,
    name: str,
    role: str,
    *,
    active: bool | None = None,
    changed_by: Principal | None = None,
) -> User:
    """Give ``name`` the role ``role`` and, unless ``active`` is None, (de)activate them.

    Deactivation revokes every session, API token and sign-in link of the user, so that
    re-activating them later revives none of those secrets: they sign in afresh.

    Raises
    ------
    NotFound
        No such user.
    InvalidInput
        An unknown role, or ``changed_by`` changing their own role or deactivating themselves.

    """
    user = get_user(session, name)
    if (
        changed_by is not None
        and user.id == changed_by.user_id
        and (role != user.role or active is False)
    ):
        raise InvalidInput("you cannot change your own role or deactivate yourself", field="role")
    user.role = check_role(role).value
    if active is not None:
        user.active = active
    if active is False:
        for kind in TokenKind:
            revoke_tokens(session, user.id, kind)
    session.flush()
    return user


def list_users(session: Session) -> list[User]:
    """Every user, by name."""
    return list(session.scalars(select(User).order_by(User.name)))


def set_password(session: Session, user: User, password: str) -> None:
    """Replace a user's password (and sign them out of every browser session)."""
    user.password_hash = hash_password(password)
    revoke_tokens(session, user.id, TokenKind.session)


def authenticate(session: Session, name: str, password: str) -> User | None:
    """The active user whose name and password match, else None (in constant-ish time)."""
    user = session.scalar(select(User).where(User.name == name))
    stored = user.password_hash if user is not None and user.password_hash else _DUMMY_HASH
    try:
        _HASHER.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return None
    if user is None or not user.password_hash or not user.active:
        return None
    if _HASHER.check_needs_rehash(user.password_hash):
        user.password_hash = _HASHER.hash(password)
    return user


def digest(secret: str) -> str:
    """The stored form of a bearer secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def issue_token(
    session: Session,
    user: User,
    kind: TokenKind,
    *,
    label: str = "",
    ttl: timedelta | None = None,
) -> tuple[str, AuthToken]:
    """A new secret of ``kind`` for ``user``; returns the secret (shown once) and its row.

    Sessions get a CSRF token and expire after :data:`SESSION_TTL`, sign-in links after
    :data:`SIGNIN_TTL`; API tokens last until revoked unless ``ttl`` is given.
    """
    if ttl is None:
        ttl = {TokenKind.session: SESSION_TTL, TokenKind.signin: SIGNIN_TTL}.get(kind)
    secret = secrets.token_urlsafe(32)
    token = AuthToken(
        user_id=user.id,
        kind=kind.value,
        token_sha256=digest(secret),
        csrf_token=secrets.token_urlsafe(32) if kind is TokenKind.session else None,
        label=label,
        expires_at=utcnow() + ttl if ttl is not None else None,
    )
    session.add(token)
    session.flush()
    return secret, token


def principal_for(session: Session, secret: str, kind: TokenKind) -> Principal | None:
    """The user a live secret of ``kind`` belongs to, else None (unknown, expired or revoked)."""
    row = session.execute(
        select(AuthToken, User)
        .join(User, User.id == AuthToken.user_id)
        .where(
            AuthToken.token_sha256 == digest(secret),
            AuthToken.kind == kind.value,
            AuthToken.revoked_at.is_(None),
            User.active.is_(True),
        )
    ).first()
    if row is None:
        return None
    token, user = row
    if token.expires_at is not None and as_utc(token.expires_at) <= utcnow():
        return None
    return Principal(user.id, user.name, Role(user.role), token.id, token.csrf_token)


def redeem_signin(session: Session, secret: str) -> User | None:
    """Use up a one-time sign-in link: its user, or None if it is unknown, used or expired.

    One conditional UPDATE marks the link used, so two clicks racing each other cannot both
    sign in.
    """
    now = utcnow()
    used = session.execute(
        update(AuthToken)
        .where(
            AuthToken.token_sha256 == digest(secret),
            AuthToken.kind == TokenKind.signin.value,
            AuthToken.revoked_at.is_(None),
            AuthToken.expires_at > now,
        )
        .values(revoked_at=now)
        .returning(AuthToken.user_id)
    ).scalar()
    if used is None:
        return None
    user = session.get(User, used)
    return user if user is not None and user.active else None


def revoke_token(session: Session, token_id: int, *, user_id: int | None = None) -> bool:
    """Revoke one token (only if it belongs to ``user_id``, when given); whether it was live."""
    q = update(AuthToken).where(AuthToken.id == token_id, AuthToken.revoked_at.is_(None))
    if user_id is not None:
        q = q.where(AuthToken.user_id == user_id)
    return bool(session.execute(q.values(revoked_at=utcnow())).rowcount)


def revoke_tokens(session: Session, user_id: int, kind: TokenKind) -> None:
    """Revoke every live token of ``kind`` of a user."""
    session.execute(
        update(AuthToken)
        .where(
            AuthToken.user_id == user_id,
            AuthToken.kind == kind.value,
            AuthToken.revoked_at.is_(None),
        )
        .values(revoked_at=utcnow())
    )


def api_tokens(session: Session, user_id: int) -> list[AuthToken]:
    """A user's live API tokens, newest first."""
    q = (
        select(AuthToken)
        .where(
            AuthToken.user_id == user_id,
            AuthToken.kind == TokenKind.api.value,
            AuthToken.revoked_at.is_(None),
        )
        .order_by(AuthToken.id.desc())
    )
    return list(session.scalars(q))
