"""Discussion threads per instance: append-only notes by annotators and reviewers."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.sql.lookup import added, get_one
from app.tables import Comment, Instance

MAX_COMMENT = 4000


def add_comment(session: Session, instance_id: int, author: str, body: str) -> Comment:
    """Append a note to an instance's thread.

    Raises
    ------
    InvalidInput
        An empty note or one longer than :data:`MAX_COMMENT` characters.
    NotFound
        No such instance.

    """
    text = body.strip()
    if not text:
        raise InvalidInput("the note is empty", field="body")
    if len(text) > MAX_COMMENT:
        raise InvalidInput(f"the note is longer than {MAX_COMMENT} characters", field="body")
    get_one(session, Instance, f"no instance {instance_id}", id=instance_id)
    comment = Comment(instance_id=instance_id, author=author, body=text)
    return added(session, comment)


def thread(session: Session, instance_id: int) -> list[Comment]:
    """An instance's notes, oldest first."""
    q = select(Comment).where(Comment.instance_id == instance_id).order_by(Comment.id)
    return list(session.scalars(q))
