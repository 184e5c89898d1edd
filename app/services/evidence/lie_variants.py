"""Lie-probe variants: how each reads its items (the extraction spec of a fit and of its apply)."""

from __future__ import annotations

from typing import Any

from app.errors import InvalidInput

# How each lie-probe variant reads its items (ExtractParams fields, besides model and layers).
# Truth: the bare statement's final token, no chat template. Lie and forced-opposite: the chat
# (system, question, response) at the end-of-turn token that closes the response.
_CHAT = {
    "format": "chat",
    "system_field": "system",
    "user_field": "question",
    "assistant_field": "response",
    "position": "end_of_turn",
}
LIE_VARIANTS: dict[str, dict[str, Any]] = {
    "truth": {"format": "text", "text_field": "statement", "position": "last"},
    "lie": _CHAT,
    "forced-opposite": _CHAT,
}


def lie_extract_spec(
    variant: str, model: str, layers: list[int] | None = None, batch_size: int = 8
) -> dict[str, Any]:
    """The ``extract`` dict of :class:`FitLieParams` for a named variant.

    Raises
    ------
    InvalidInput
        For an unknown variant.

    """
    if variant not in LIE_VARIANTS:
        raise InvalidInput(f"must be one of {', '.join(LIE_VARIANTS)}", field="variant")
    return {**LIE_VARIANTS[variant], "model": model, "layers": layers, "batch_size": batch_size}
