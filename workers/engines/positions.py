"""Token positions inside a rendered chat, and their capture in one forward per batch.

A :class:`Layout` marks, in one transcript's token ids, the span of the response (the last
message's content, or a statement located inside it) and the end-of-turn token that closes it.
Position rules (:data:`POSITIONS`) read a layout: the statement's last token, the end-of-turn
token, every response token (optionally leaving out the last k: Goldowsky-Dill et al.'s detect
mask) or the response's first token (a generated yes/no answer). :func:`capture_positions` runs
every rule of a batch in the same forward, with the engine's guarantees
(:mod:`workers.engines.capture`): masks from true lengths, no padded position read, layers
numbered as ``hidden_states`` (checked against hooks in the tests), transcripts cut after the
last position read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from app.stats.probe_estimators import TokenRows
from workers.engines.capture import (
    DEFAULT_OUTPUT_DTYPE,
    LayerRecorder,
    OutputDtype,
    PaddingSide,
    _numpy_dtype,
    _run_batch,
    check_single_bos,
    decoder_blocks,
    plan_batches,
    validate_layers,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class Layout:
    """One transcript and where its response sits in it.

    ``ids`` are the token ids; the response (statement) tokens are ``response_start`` up to
    ``response_end`` (exclusive); ``end_of_turn`` is the index of the end-of-turn token that
    closes the response's turn, or None (plain text, or a generation cut before it).
    """

    ids: tuple[int, ...]
    response_start: int
    response_end: int
    end_of_turn: int | None = None

    def __post_init__(self) -> None:
        n = len(self.ids)
        if not 0 <= self.response_start <= self.response_end <= n:
            raise ValueError(
                f"response span {self.response_start}:{self.response_end} outside {n} tokens"
            )
        if self.end_of_turn is not None and not self.response_end <= self.end_of_turn < n:
            raise ValueError(f"end-of-turn index {self.end_of_turn} not after the response")


def _encode_with_offsets(
    tokenizer: PreTrainedTokenizerBase, text: str
) -> tuple[list[int], list[tuple[int, int]]]:
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("locating a response in tokens needs a fast tokenizer (offset mapping)")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = [int(t) for t in enc["input_ids"]]
    check_single_bos(ids, tokenizer.bos_token_id)
    return ids, [(int(a), int(b)) for a, b in enc["offset_mapping"]]


def _token_span(offsets: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """Tokens whose characters overlap ``[start, end)``, as ``(first, one past last)``."""
    hits = [k for k, (a, b) in enumerate(offsets) if a < end and b > start and b > a]
    if not hits:
        raise ValueError(f"no token covers characters {start}:{end}")
    return hits[0], hits[-1] + 1


def chat_layout(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[dict[str, str]],
    *,
    statement: str | None = None,
    end_of_turn_id: int | None = None,
    **template_kwargs: Any,
) -> Layout:
    """Render a chat and locate its last message's content (or ``statement`` inside it).

    Parameters
    ----------
    tokenizer
        A fast tokenizer with a chat template.
    messages
        The chat; the last message is the response (usually the assistant's).
    statement
        Text to locate inside the last message's content (its last occurrence); default the
        whole content.
    end_of_turn_id
        Token that closes a turn (default ``tokenizer.eos_token_id``); the first one after the
        response is the layout's ``end_of_turn``.
    template_kwargs
        Passed to the chat template.

    Raises
    ------
    ValueError
        If the content or the statement cannot be found in the rendered text.

    """
    text = str(tokenizer.apply_chat_template(list(messages), tokenize=False, **template_kwargs))
    content = messages[-1]["content"]
    c0 = text.rfind(content) if content else -1
    if c0 < 0 and content.strip():  # templates may strip the content
        content = content.strip()
        c0 = text.rfind(content)
    if c0 < 0:
        raise ValueError("the last message's content is not in the rendered chat")
    c1 = c0 + len(content)
    if statement is not None:
        s0 = text.rfind(statement, c0, c1)
        if s0 < 0 or not statement:
            raise ValueError(f"statement {statement[:60]!r} is not in the last message")
        c0, c1 = s0, s0 + len(statement)
    ids, offsets = _encode_with_offsets(tokenizer, text)
    start, end = _token_span(offsets, c0, c1)
    eot_id = tokenizer.eos_token_id if end_of_turn_id is None else end_of_turn_id
    eot = next((k for k in range(end, len(ids)) if ids[k] == eot_id), None)
    return Layout(tuple(ids), start, end, eot)


def text_layout(tokenizer: PreTrainedTokenizerBase, text: str) -> Layout:
    """A bare statement (no chat template): the response is all of its text tokens.

    Tokenized as the ``text`` capture format does (with the tokenizer's special tokens, so a
    BOS, if any, precedes the span); there is no end-of-turn token.
    """
    enc = tokenizer(text, return_offsets_mapping=True)
    ids = [int(t) for t in enc["input_ids"]]
    check_single_bos(ids, tokenizer.bos_token_id)
    start, end = _token_span([(int(a), int(b)) for a, b in enc["offset_mapping"]], 0, len(text))
    return Layout(tuple(ids), start, end, None)


# --- rules


class SpanRule(Protocol):
    """Token indices of a layout to read."""

    @property
    def name(self) -> str:
        """The rule's registry name."""
        ...

    def resolve(self, layout: Layout) -> list[int]:
        """Sorted token indices (at least one), or ValueError."""
        ...


@dataclass(frozen=True)
class StatementEnd:
    """The last token of the response (or of the located statement)."""

    @property
    def name(self) -> str:
        """``statement_end``."""
        return "statement_end"

    def resolve(self, layout: Layout) -> list[int]:
        """``[response_end - 1]``."""
        if layout.response_end == layout.response_start:
            raise ValueError("the response has no tokens")
        return [layout.response_end - 1]


@dataclass(frozen=True)
class TurnEnd:
    """The end-of-turn token that closes the response's turn."""

    @property
    def name(self) -> str:
        """``end_of_turn``."""
        return "end_of_turn"

    def resolve(self, layout: Layout) -> list[int]:
        """``[end_of_turn]``."""
        if layout.end_of_turn is None:
            raise ValueError("no end-of-turn token after the response")
        return [layout.end_of_turn]


@dataclass(frozen=True)
class ResponseTokens:
    """Every response token, leaving out the last ``exclude_last`` (a detect mask).

    A response of ``exclude_last`` tokens or fewer keeps its first token: the stress tests'
    answers are a word or two ("Yes."), and a mask that reads nothing there would leave the
    item unscored (Goldowsky-Dill et al.'s dialogues, where the rule comes from, are longer).
    """

    exclude_last: int = 0

    def __post_init__(self) -> None:
        if self.exclude_last < 0:
            raise ValueError("exclude_last must be >= 0")

    @property
    def name(self) -> str:
        """``response`` or ``response:-k``."""
        return "response" if not self.exclude_last else f"response:-{self.exclude_last}"

    def resolve(self, layout: Layout) -> list[int]:
        """``range(response_start, response_end - exclude_last)``, at least the first token."""
        if layout.response_end <= layout.response_start:
            raise ValueError("the response has no tokens")
        end = max(layout.response_end - self.exclude_last, layout.response_start + 1)
        return list(range(layout.response_start, end))


@dataclass(frozen=True)
class ResponseFirst:
    """The response's first token (e.g. a generated "Yes" or "No")."""

    @property
    def name(self) -> str:
        """``response_first``."""
        return "response_first"

    def resolve(self, layout: Layout) -> list[int]:
        """``[response_start]``."""
        if layout.response_end == layout.response_start:
            raise ValueError("the response has no tokens")
        return [layout.response_start]


POSITIONS: dict[str, SpanRule] = {
    "statement_end": StatementEnd(),
    "end_of_turn": TurnEnd(),
    "response": ResponseTokens(),
    "response_first": ResponseFirst(),
}
"""Named position rules; :func:`parse_span_rule` also reads ``response:-<k>``."""


def parse_span_rule(text: str) -> SpanRule:
    """A registered rule or ``response:-<k>``; ValueError otherwise."""
    if text in POSITIONS:
        return POSITIONS[text]
    kind, _, arg = text.partition(":")
    if kind == "response" and arg.startswith("-") and arg[1:].isdigit():
        return ResponseTokens(int(arg[1:]))
    raise ValueError(f"unknown position rule {text!r}; one of {', '.join(POSITIONS)}, response:-k")


# --- capture


@dataclass(frozen=True)
class PositionCapture:
    """What one rule read, grouped by item.

    ``rows`` holds the values ``[n_tokens, n_layers, d]`` (:class:`TokenRows`, offsets per
    item) and ``positions`` (``int64[n_tokens]``) the token index of every row.
    """

    rows: TokenRows
    positions: np.ndarray


def resolve_rules(
    layouts: Sequence[Layout], rules: Mapping[str, SpanRule]
) -> dict[str, list[list[int]]]:
    """Every rule's token indices per layout; ValueError naming the item and the rule."""
    out: dict[str, list[list[int]]] = {}
    for name, rule in rules.items():
        per_item = []
        for i, layout in enumerate(layouts):
            try:
                per_item.append(rule.resolve(layout))
            except ValueError as exc:
                raise ValueError(f"item {i}, position rule {name!r}: {exc}") from None
        out[name] = per_item
    return out


def capture_positions(
    model: PreTrainedModel,
    layouts: Sequence[Layout],
    rules: Mapping[str, SpanRule],
    *,
    layers: Sequence[int],
    batch_size: int = 8,
    padding_side: PaddingSide = "right",
    pad_token_id: int | None = None,
    output_dtype: OutputDtype = DEFAULT_OUTPUT_DTYPE,
) -> dict[str, PositionCapture]:
    """Residual-stream vectors at every rule's positions, all rules in one forward per batch.

    Parameters
    ----------
    model
        A transformers causal LM (or its base) with ``L`` decoder blocks.
    layouts
        ``n_items`` layouts (:func:`chat_layout`, :func:`text_layout`, a generated reply).
    rules
        ``{name: rule}``, e.g. ``{k: POSITIONS[k] for k in ("statement_end", "response")}``.
    layers
        Layer indices in ``0..L`` as in :func:`workers.engines.capture.capture`.
    batch_size, padding_side, pad_token_id, output_dtype
        As in :func:`workers.engines.capture.capture`.

    Returns
    -------
    dict of str to PositionCapture
        Per rule, ``[n_tokens, len(layers), d_model]`` rows grouped by item (in the order of
        ``layouts``), with their token indices.

    """
    import torch

    blocks = decoder_blocks(model)
    wanted = validate_layers(layers, len(blocks))
    per_rule = resolve_rules(layouts, rules)
    # The union of every rule's positions per item: each is read once, in one forward.
    union = [sorted({p for name in rules for p in per_rule[name][i]}) for i in range(len(layouts))]
    last = np.asarray([u[-1] for u in union], dtype=np.int64)
    np_dtype = _numpy_dtype(output_dtype, getattr(model, "dtype", torch.float32))
    batches = plan_batches(
        [layout.ids for layout in layouts],
        last,
        batch_size=batch_size,
        padding_side=padding_side,
        pad_token_id=0 if pad_token_id is None else pad_token_id,
    )
    read: list[np.ndarray | None] = [None] * len(layouts)  # [len(union[i]), n_layers, d]
    recorder = LayerRecorder(blocks, wanted)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for batch in batches:
                gather, cols = [], []
                for row, item in enumerate(batch.items):
                    # rows[row] is the padded column of the item's last read position.
                    shift = int(batch.rows[row]) - int(last[item])
                    gather += [row] * len(union[item])
                    cols += [shift + p for p in union[item]]
                multi = dataclasses.replace(
                    batch, rows=torch.tensor(cols), gather=torch.tensor(gather)
                )
                _run_batch(model, multi, recorder)
                kept = torch.stack([t for t in recorder.kept if t is not None], dim=1)
                values = kept.to(torch.float32 if np_dtype == np.float32 else torch.float16)
                values_np = values.cpu().numpy()
                start = 0
                for item in batch.items:
                    read[item] = values_np[start : start + len(union[item])]
                    start += len(union[item])
    finally:
        recorder.remove()
        model.train(was_training)
    out = {}
    for name in rules:
        parts, positions = [], []
        for i, u in enumerate(union):
            index = {p: k for k, p in enumerate(u)}
            values_i = read[i]
            assert values_i is not None
            parts.append(values_i[[index[p] for p in per_rule[name][i]]])
            positions.extend(per_rule[name][i])
        out[name] = PositionCapture(
            TokenRows.from_items(parts), np.asarray(positions, dtype=np.int64)
        )
    return out
