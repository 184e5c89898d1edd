"""``appellate users``: add users, list them, and issue sign-in links and API tokens."""

from __future__ import annotations

import secrets
import sys
from typing import Annotated

import typer
from sqlalchemy.orm import Session

from app.cli.support import in_store
from app.services.accounts import users
from app.settings import Settings
from app.tables import Role, TokenKind

users_app = typer.Typer(no_args_is_help=True, help="Users, sign-in links and API tokens.")


def signin_url(secret: str, base_url: str | None = None) -> str:
    """The one-time sign-in URL of ``secret`` on the configured server."""
    if base_url is None:
        settings = Settings()
        base_url = f"http://{settings.host}:{settings.port}"
    return f"{base_url.rstrip('/')}/signin/{secret}"


def add_user(name: str, role: Role, password: str | None) -> tuple[str | None, str]:
    """Create a user and a one-time sign-in link; returns (generated password or None, link)."""
    generated = None

    def work(session: Session) -> str:
        user = users.create_user(session, name, role.value, password)
        secret, _ = users.issue_token(session, user, TokenKind.signin)
        return secret

    if password is None:
        generated = secrets.token_urlsafe(12)
        password = generated
    # The first user of a new deployment may come before anything is imported.
    secret = in_store(work, create=True)
    return generated, signin_url(secret)


@users_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="User name (letters, digits, _ . @ -).")],
    role: Annotated[Role, typer.Option("--role", help="annotator, reviewer or admin.")],
    password_stdin: Annotated[
        bool,
        typer.Option("--password-stdin", help="Read the password from stdin (else generated)."),
    ] = False,
) -> None:
    """Add a user; prints a generated password (unless read from stdin) and a sign-in link."""
    password = sys.stdin.readline().rstrip("\n") if password_stdin else None
    generated, link = add_user(name, role, password)
    typer.echo(f"added {name} ({role.value})")
    if generated is not None:
        typer.echo(f"password: {generated}")
    typer.echo(f"one-time sign-in link (24 h): {link}")


@users_app.command("list")
def list_command() -> None:
    """Every user with role and status."""

    def work(session: Session) -> list[str]:
        return [
            f"{u.name}\t{u.role}\t{'active' if u.active else 'deactivated'}"
            for u in users.list_users(session)
        ]

    for line in in_store(work):
        typer.echo(line)


@users_app.command("link")
def link(name: Annotated[str, typer.Argument(help="User name.")]) -> None:
    """Print a new one-time sign-in link for a user (valid 24 hours)."""

    def work(session: Session) -> str:
        secret, _ = users.issue_token(session, users.get_user(session, name), TokenKind.signin)
        return secret

    typer.echo(signin_url(in_store(work)))


@users_app.command("token")
def token(
    name: Annotated[str, typer.Argument(help="User name.")],
    label: Annotated[str, typer.Option(help="What the token is for.")] = "cli",
) -> None:
    """Print a new API token (send it as the header 'Authorization: Bearer TOKEN')."""

    def work(session: Session) -> str:
        user = users.get_user(session, name)
        secret, _ = users.issue_token(session, user, TokenKind.api, label=label)
        return secret

    typer.echo(in_store(work))


@users_app.command("role")
def role_command(
    name: Annotated[str, typer.Argument(help="User name.")],
    role: Annotated[Role, typer.Argument(help="annotator, reviewer or admin.")],
) -> None:
    """Change a user's role."""
    in_store(lambda session: users.set_role(session, name, role.value))
    typer.echo(f"{name} is now {role.value}")
