"""Prompt templates of the jobs that put a benchmark item to a model (answering, critique).

A template is ``str.format`` text with named placeholders; the values (questions, options)
are substituted, never parsed as templates themselves, so braces in them are harmless.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence

from app.errors import InvalidInput
from app.services.evidence.choices import option_letters


def check_template(
    template: str, required: Iterable[str], allowed: Iterable[str], *, field: str = "template"
) -> None:
    """Refuse a template that lacks a ``required`` placeholder or names one not ``allowed``.

    Raises
    ------
    InvalidInput
        Naming ``field``, for bad format syntax, a missing or an unknown placeholder.

    """
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f}
    except ValueError as exc:
        raise InvalidInput(f"not a valid template: {exc}", field=field) from None
    needed = list(required)
    if not set(needed) <= names:
        wanted = " and ".join("{" + n + "}" for n in needed)
        raise InvalidInput(f"needs {wanted}", field=field)
    unknown = names - set(allowed)
    if unknown:
        raise InvalidInput(f"unknown placeholder(s): {', '.join(sorted(unknown))}", field=field)


def option_lines(options: Sequence[str]) -> str:
    """One ``A. text`` line per option."""
    letters = option_letters(len(options))
    return "\n".join(f"{k}. {text}" for k, text in zip(letters, options, strict=True))


def subject_of(payload: dict[str, object]) -> str:
    """An item's subject in words (``high_school_biology`` -> ``high school biology``)."""
    return str(payload.get("subject") or "").replace("_", " ")
