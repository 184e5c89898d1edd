"""The registry of language models: where the weights are, their fingerprint, how to load them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.sql.lookup import ensure_named, get_one
from app.tables import LanguageModel


def register_language_model(
    session: Session,
    name: str,
    *,
    path: str,
    fingerprint: str,
    dtype: str = "auto",
    chat_template: str | None = None,
    n_layers: int | None = None,
    d_model: int | None = None,
    details: dict[str, Any] | None = None,
) -> LanguageModel:
    """Register ``name``, or return it unchanged when it is already registered identically.

    Parameters
    ----------
    session
        The caller's session; a new row is flushed, never committed.
    name
        Unique model name used by jobs and the CLI (``smollm2``).
    path
        Local model directory or a repo id in the local HF cache.
    fingerprint
        Content fingerprint of the weights; activations name the model by it.
    dtype
        ``auto`` (bfloat16 on a GPU, float32 on the CPU), ``float32``, ``bfloat16`` or ``float16``.
    chat_template, n_layers, d_model, details
        Descriptive fields stored with a new registration.

    Raises
    ------
    Conflict
        If ``name`` is registered with another path, fingerprint or dtype.

    """
    return ensure_named(
        session,
        LanguageModel,
        name,
        {"path": path, "fingerprint": fingerprint, "dtype": dtype},
        {
            "chat_template": chat_template,
            "n_layers": n_layers,
            "d_model": d_model,
            "details": details or {},
        },
        lambda row, differing: (
            f"model {name!r} is already registered with another "
            + ", ".join(f"{k} ({getattr(row, k)!r})" for k in differing)
        ),
    )


def get_language_model(session: Session, name: str) -> LanguageModel:
    """The model registered as ``name`` (``NotFound`` if there is none)."""
    return get_one(session, LanguageModel, f"no language model named {name!r}", name=name)


def list_language_models(session: Session) -> list[LanguageModel]:
    """Every registered model, by name."""
    return list(session.scalars(select(LanguageModel).order_by(LanguageModel.name)))
