"""Residual-stream capture for prefilled transcripts: one position per item, chosen layers.

Batched with either padding side; runs only the blocks it needs and never the LM head.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, Unpack

import numpy as np

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

PaddingSide = Literal["left", "right"]
OutputDtype = Literal["float32", "float16", "model"]
DEFAULT_OUTPUT_DTYPE: OutputDtype = "float32"
# Attribute paths of the decoder block list on a model's base, most common first.
_BLOCK_PATHS = ("layers", "h", "blocks", "decoder.layers", "model.layers", "transformer.h")


# --- threads


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def set_torch_threads(threads: int | None = None) -> int:
    """Run torch's CPU kernels on ``threads`` threads (default: :func:`usable_cores`).

    torch's own default counts every core of the machine, not the ones a container or
    ``taskset`` leaves to this process; each extra thread then waits on a busy core.
    Returns the count now in use.
    """
    import torch

    wanted = threads or usable_cores()
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
    return wanted


# --- position rules


@dataclass(frozen=True)
class LastToken:
    """The last token of each transcript."""

    def describe(self) -> str:
        """The text stored in ``ActivationSet.position_rule``."""
        return "last"


@dataclass(frozen=True)
class EndOfTurn:
    """The last occurrence of ``token_id`` (an end-of-turn token such as ``<|im_end|>``)."""

    token_id: int

    def describe(self) -> str:
        """The text stored in ``ActivationSet.position_rule``."""
        return f"end_of_turn:{self.token_id}"


@dataclass(frozen=True)
class BeforeMarker:
    """The token immediately before the last occurrence of the token sequence ``marker``."""

    marker: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.marker:
            raise ValueError("the marker must contain at least one token")

    def describe(self) -> str:
        """The text stored in ``ActivationSet.position_rule``."""
        return "before_marker:" + ",".join(str(t) for t in self.marker)


@dataclass(frozen=True)
class ExplicitIndex:
    """A given position per item: ``indices[i]`` (from 0, never negative) for transcript ``i``."""

    indices: tuple[int, ...]

    def describe(self) -> str:
        """The text stored in ``ActivationSet.position_rule`` (the indices live with the data)."""
        return "explicit"


PositionRule = LastToken | EndOfTurn | BeforeMarker | ExplicitIndex


def parse_position_rule(text: str) -> PositionRule:
    """Inverse of ``describe()`` for the rules that need no per-item data.

    Raises
    ------
    ValueError
        For ``explicit`` (its indices are not in the text) and anything malformed.

    """
    kind, _, arg = text.partition(":")
    try:
        if kind == "last" and not arg:
            return LastToken()
        if kind == "end_of_turn":
            return EndOfTurn(int(arg))
        if kind == "before_marker":
            return BeforeMarker(tuple(int(t) for t in arg.split(",")))
    except ValueError:
        pass
    raise ValueError(f"cannot parse position rule {text!r}")


def _last_subsequence(ids: Sequence[int], marker: tuple[int, ...]) -> int:
    """Start of the last occurrence of ``marker`` in ``ids``, or -1."""
    m = len(marker)
    for start in range(len(ids) - m, -1, -1):
        if tuple(ids[start : start + m]) == marker:
            return start
    return -1


def resolve_positions(transcripts: Sequence[Sequence[int]], rule: PositionRule) -> np.ndarray:
    """The capture position of every transcript, counted from its first (unpadded) token.

    Parameters
    ----------
    transcripts
        ``n_items`` token-id lists.
    rule
        Which token to read in each transcript.

    Returns
    -------
    np.ndarray
        ``int64[n_items]``, each in ``0..len(transcript) - 1``.

    Raises
    ------
    ValueError
        If a transcript is empty or the rule finds no position in it.

    """
    if isinstance(rule, ExplicitIndex) and len(rule.indices) != len(transcripts):
        raise ValueError(f"{len(rule.indices)} explicit indices for {len(transcripts)} transcripts")
    out = np.empty(len(transcripts), dtype=np.int64)
    for i, ids in enumerate(transcripts):
        n = len(ids)
        if n == 0:
            raise ValueError(f"transcript {i} is empty")
        if isinstance(rule, LastToken):
            pos = n - 1
        elif isinstance(rule, EndOfTurn):
            # Scan from the end: the closing token of the last turn is what we want.
            pos = next((j for j in range(n - 1, -1, -1) if ids[j] == rule.token_id), -1)
        elif isinstance(rule, BeforeMarker):
            start = _last_subsequence(ids, rule.marker)
            pos = start - 1 if start >= 0 else -1
        else:
            pos = rule.indices[i] if 0 <= rule.indices[i] < n else -1
        if pos < 0:
            raise ValueError(f"transcript {i}: no position for rule {rule.describe()!r}")
        out[i] = pos
    return out


# --- chat rendering


def render_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[dict[str, str]],
    *,
    add_generation_prompt: bool = False,
    prefill: str | None = None,
    **template_kwargs: Any,
) -> list[int]:
    """Token ids of a chat rendered with the model's template, optionally with a prefilled reply.

    The template text already contains any BOS, so it is tokenized *without* special tokens
    (tokenizing it with them would prepend a second BOS on Llama-style tokenizers).

    Parameters
    ----------
    tokenizer
        A tokenizer with a chat template.
    messages
        ``[{"role": ..., "content": ...}, ...]``.
    add_generation_prompt
        Open an assistant turn at the end.
    prefill
        Text appended after the opened assistant turn (requires ``add_generation_prompt``).
    template_kwargs
        Passed to the template, e.g. ``enable_thinking=False``.

    """
    if prefill is not None and not add_generation_prompt:
        raise ValueError("a prefill continues an assistant turn: set add_generation_prompt")
    text = tokenizer.apply_chat_template(
        list(messages),
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        **template_kwargs,
    )
    text = str(text) + (prefill or "")
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    check_single_bos(ids, tokenizer.bos_token_id)
    return ids


def check_single_bos(ids: Sequence[int], bos_token_id: int | None) -> None:
    """Refuse a transcript that starts with two BOS tokens (a template tokenized with specials).

    Raises
    ------
    ValueError
        If ``ids`` begins with ``bos_token_id`` twice.

    """
    if bos_token_id is not None and len(ids) >= 2 and ids[0] == ids[1] == bos_token_id:
        raise ValueError(
            "transcript starts with a double BOS: tokenize with add_special_tokens=False"
        )


# --- batching


@dataclass
class CaptureBatch:
    """One padded batch: which items, their padded ids and mask, positions and rows to read.

    ``input_ids``, ``attention_mask`` and ``position_ids`` are ``int64[b, t]``; ``rows`` is
    ``int64[b]`` (the padded index of each item's capture position); ``items`` is ``int64[b]``.
    For several positions per item, ``gather`` (``int64[k]``) names the batch row of each of
    ``k`` reads and ``rows`` (then ``int64[k]``) their padded columns.
    """

    items: np.ndarray
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    rows: torch.Tensor
    gather: torch.Tensor | None = None


def plan_batches(
    transcripts: Sequence[Sequence[int]],
    positions: np.ndarray,
    *,
    batch_size: int,
    padding_side: PaddingSide = "right",
    pad_token_id: int = 0,
) -> list[CaptureBatch]:
    """Length-bucketed padded batches (longest first) for the given capture positions.

    Every transcript is cut after its capture position: a causal model's state there does not
    depend on later tokens, so they are never computed. The attention mask comes from the true
    lengths (never from ``ids != pad_token_id``: the pad token may also be the end-of-turn token)
    and position ids from the mask, so left padding keeps each token's absolute position.

    Parameters
    ----------
    transcripts
        ``n_items`` token-id lists.
    positions
        ``int64[n_items]`` capture positions from :func:`resolve_positions`.
    batch_size
        Items per batch.
    padding_side
        ``right`` or ``left``.
    pad_token_id
        Id written into padded slots (masked out, so any valid id works).

    """
    import torch

    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', not {padding_side!r}")
    lengths = np.asarray(positions, dtype=np.int64) + 1
    # Longest first, so that a batch too big for the device fails at once, not at the end.
    order = np.argsort(-lengths, kind="stable")
    batches = []
    for start in range(0, len(order), batch_size):
        items = order[start : start + batch_size]
        width = int(lengths[items].max())
        ids = torch.full((len(items), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(items), width), dtype=torch.long)
        for row, item in enumerate(items):
            n = int(lengths[item])
            cols = slice(0, n) if padding_side == "right" else slice(width - n, width)
            ids[row, cols] = torch.as_tensor(list(transcripts[item][:n]), dtype=torch.long)
            mask[row, cols] = 1
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        # Cutting after the capture position makes it the last real token of every row.
        rows = (
            torch.as_tensor(lengths[items] - 1)
            if padding_side == "right"
            else torch.full((len(items),), width - 1)
        )
        batches.append(CaptureBatch(items, ids, mask, position_ids, rows.to(torch.long)))
    return batches


# --- hooks


def decoder_blocks(model: PreTrainedModel) -> torch.nn.ModuleList:
    """The model's list of decoder blocks (``model.model.layers`` for Llama, ``.h`` for GPT-2).

    Raises
    ------
    ValueError
        If no module list of ``config.num_hidden_layers`` blocks is found.

    """
    import torch

    base = model.base_model
    n_layers = int(model.config.num_hidden_layers)
    for path in _BLOCK_PATHS:
        module: Any = base
        for part in path.split("."):
            module = getattr(module, part, None)
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers:
            return module
    found = [m for m in base.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n_layers]
    if len(found) == 1:
        return found[0]
    raise ValueError(f"cannot find the {n_layers} decoder blocks of {type(model).__name__}")


def validate_layers(layers: Sequence[int], n_layers: int) -> list[int]:
    """``layers`` as a list after checking each is in ``0..n_layers`` and none repeats.

    Raises
    ------
    ValueError
        For an empty list, a repeated, negative or too large index.

    """
    out = [int(x) for x in layers]
    if not out:
        raise ValueError("no layers requested")
    if len(set(out)) != len(out):
        raise ValueError(f"repeated layer in {out}")
    bad = [x for x in out if not 0 <= x <= n_layers]
    if bad:
        raise ValueError(
            f"layers {bad} out of range 0..{n_layers} "
            "(0 = embeddings, i = output of block i-1; negative indices are not allowed)"
        )
    return out


class _StopForward(Exception):
    """Raised by the hook of the deepest needed block to end the forward early."""


def _first_tensor(value: Any) -> torch.Tensor:
    """A block's hidden states whether it returns a tensor (transformers 5) or a tuple (4.x)."""
    return value if hasattr(value, "shape") else value[0]


class LayerRecorder:
    """Hooks that keep row ``rows[b]`` of each needed layer for every batch item ``b``.

    A pre-hook on block 0 reads layer 0 and a forward hook on block ``i - 1`` reads layer ``i``.
    With ``stop`` the hook of the deepest needed block raises :class:`_StopForward`, so later
    blocks, the final norm and the LM head never run; without it the forward completes (the
    judge needs its logits) and each forward overwrites ``kept``. ``rows = None`` keeps the last
    position of every row, which is the newest token during left-padded generation.

    Hooks depend only on the block list and each block's first input/output, which Llama, Qwen3,
    GPT-2 and most HF decoders share; calling the blocks ourselves would copy every
    architecture's mask, rotary and position-embedding code.
    """

    def __init__(
        self, blocks: torch.nn.ModuleList, layers: list[int], *, stop: bool = True
    ) -> None:
        self.layers = layers
        self.deepest = max(layers)
        self.rows: torch.Tensor | None = None
        # With several reads per item: the batch row of each entry of ``rows`` (else row b).
        self.batch: torch.Tensor | None = None
        self.kept: list[torch.Tensor | None] = [None] * len(layers)
        self._handles: list[Any] = []
        self.stop_at_embeddings = stop and self.deepest == 0
        column = {layer: col for col, layer in enumerate(layers)}
        if 0 in column:
            pre = blocks[0].register_forward_pre_hook(self._pre_hook(column[0]), with_kwargs=True)
            self._handles.append(pre)
        for layer in range(1, self.deepest + 1):
            if layer in column or layer == self.deepest:
                hook = self._post_hook(column.get(layer), stop=stop and layer == self.deepest)
                self._handles.append(blocks[layer - 1].register_forward_hook(hook))

    def _keep(self, col: int | None, hidden: torch.Tensor) -> None:
        if col is not None and self.rows is None:
            self.kept[col] = hidden[:, -1]
        elif col is not None:
            assert self.rows is not None
            rows = self.rows.to(hidden.device)
            batch = _batch_index(rows) if self.batch is None else self.batch.to(hidden.device)
            self.kept[col] = hidden[batch, rows]

    def _pre_hook(self, col: int) -> Any:
        def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            self._keep(col, args[0] if args else kwargs["hidden_states"])
            if self.stop_at_embeddings:
                raise _StopForward

        return hook

    def _post_hook(self, col: int | None, *, stop: bool) -> Any:
        def hook(_module: Any, _args: Any, output: Any) -> None:
            self._keep(col, _first_tensor(output))
            if stop:
                raise _StopForward

        return hook

    def remove(self) -> None:
        """Detach every hook."""
        for handle in self._handles:
            handle.remove()


def _batch_index(index: torch.Tensor) -> torch.Tensor:
    """``arange(len(index))`` on ``index``'s device (the batch axis for row gathers)."""
    import torch

    return torch.arange(index.shape[0], device=index.device)


# --- capture


def _numpy_dtype(output_dtype: OutputDtype, model_dtype: torch.dtype) -> np.dtype:
    import torch

    if output_dtype == "float16" or (output_dtype == "model" and model_dtype == torch.float16):
        return np.dtype(np.float16)
    # numpy has no bfloat16; float32 holds every bfloat16 value exactly.
    return np.dtype(np.float32)


def _run_batch(model: PreTrainedModel, batch: CaptureBatch, recorder: LayerRecorder) -> None:
    """One forward of the model's base over ``batch``, ended by ``recorder``'s stop hook."""
    device = model.get_input_embeddings().weight.device
    recorder.rows = batch.rows.to(device)
    recorder.batch = None if batch.gather is None else batch.gather.to(device)
    recorder.kept = [None] * len(recorder.layers)
    try:
        model.base_model(
            input_ids=batch.input_ids.to(device),
            attention_mask=batch.attention_mask.to(device),
            position_ids=batch.position_ids.to(device),
            use_cache=False,
            output_hidden_states=False,
            output_attentions=False,
        )
    except _StopForward:
        return
    raise RuntimeError("the forward finished without reaching the deepest capture block")


def iter_capture(
    model: PreTrainedModel,
    transcripts: Sequence[Sequence[int]],
    *,
    positions: PositionRule,
    layers: Sequence[int],
    batch_size: int = 8,
    padding_side: PaddingSide = "right",
    pad_token_id: int | None = None,
    output_dtype: OutputDtype = DEFAULT_OUTPUT_DTYPE,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Capture batch by batch (longest transcripts first), for progress and per-batch writes.

    Yields
    ------
    items : np.ndarray
        ``int64[b]`` indices into ``transcripts``.
    values : np.ndarray
        ``[b, n_layers, d_model]``, ``values[j, k]`` is layer ``layers[k]`` of ``items[j]``.

    See :func:`capture` for the parameters.

    """
    import torch

    blocks = decoder_blocks(model)
    wanted = validate_layers(layers, len(blocks))
    where = resolve_positions(transcripts, positions)
    if pad_token_id is None:
        pad_token_id = 0  # masked out; any id inside the vocabulary will do
    np_dtype = _numpy_dtype(output_dtype, model.dtype)
    batches = plan_batches(
        transcripts,
        where,
        batch_size=batch_size,
        padding_side=padding_side,
        pad_token_id=pad_token_id,
    )
    recorder = LayerRecorder(blocks, wanted)
    was_training = model.training
    model.eval()  # dropout would make captures random
    try:
        with torch.inference_mode():
            for batch in batches:
                _run_batch(model, batch, recorder)
                kept = torch.stack([t for t in recorder.kept if t is not None], dim=1)
                values = kept.to(torch.float32 if np_dtype == np.float32 else torch.float16)
                yield batch.items, values.cpu().numpy()
    finally:
        recorder.remove()
        model.train(was_training)


class CaptureOptions(TypedDict):
    """The keyword parameters of :func:`iter_capture`, passed on by :func:`capture`."""

    positions: PositionRule
    layers: Sequence[int]
    batch_size: NotRequired[int]
    padding_side: NotRequired[PaddingSide]
    pad_token_id: NotRequired[int | None]
    output_dtype: NotRequired[OutputDtype]


def capture(
    model: PreTrainedModel, transcripts: Sequence[Sequence[int]], **options: Unpack[CaptureOptions]
) -> np.ndarray:
    """Residual-stream vectors of every transcript at one position and the given layers.

    Parameters
    ----------
    model
        A transformers causal LM (or its base model) with ``L`` decoder blocks.
    transcripts
        ``n_items`` token-id lists, already rendered (see :func:`render_chat`), unpadded.
    positions
        Which token to read: :class:`LastToken`, :class:`EndOfTurn`, :class:`BeforeMarker` or
        :class:`ExplicitIndex`.
    layers
        Layer indices in ``0..L`` (0 = embeddings, ``i`` = output of block ``i - 1``; see the
        module docstring). Output columns follow this order.
    batch_size
        Transcripts per forward; transcripts are grouped by length to limit padding.
    padding_side
        Where padding goes; results do not depend on it beyond float rounding.
    pad_token_id
        Id for padded slots (masked, so only needs to be a valid id; default 0).
    output_dtype
        ``float32`` (default), ``float16`` or ``model`` (the model's dtype where numpy has it;
        bfloat16 comes back as float32, which holds it exactly).

    Returns
    -------
    np.ndarray
        ``[n_items, len(layers), d_model]`` in the order of ``transcripts``.

    Notes
    -----
    Layer numbering (the only one used in Appellate, stored in ``ActivationSet.layers``): for a
    model with ``L`` blocks, ``0`` is the embedding output, i.e. the input of block 0 (for GPT-2
    it already includes the position embeddings), and ``i >= 1`` is the output of block
    ``i - 1``, the residual stream after ``i`` blocks. For ``i < L`` this is exactly
    transformers' ``hidden_states[i]``. For ``i = L`` it is *not* ``hidden_states[L]``
    (= ``hidden_states[-1]``), which transformers replaces by the output of the final norm.
    Negative indices are refused.

    The forward runs the model's base (no LM head, so no logits) with ``use_cache=False``;
    hooks on the decoder blocks keep one row per item and stop the forward after the deepest
    needed block (see ``LayerRecorder``).

    """
    import torch

    shape = (len(transcripts), len(options["layers"]), int(model.config.hidden_size))
    dtype = options.get("output_dtype", DEFAULT_OUTPUT_DTYPE)
    out = np.empty(shape, dtype=_numpy_dtype(dtype, getattr(model, "dtype", torch.float32)))
    for items, values in iter_capture(model, transcripts, **options):
        out[items] = values
    return out
