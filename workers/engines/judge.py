"""Local pairwise judging with transformers: greedy generation or forced choice, batched by length.

The residual stream at the position immediately before the verdict token is kept while judging,
without an extra forward: during generation, layer hooks keep the newest position of every step
and a logits processor files them with that step's verdict-label logits; the step that emitted
the verdict token supplies both. In forced-choice mode the verdict prefix is appended and the
single forward that scores the labels is also the one captured.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from app.services.jobs.judge_protocol import SLOTS, VERDICT_PREFIX, parse_output, strip_verdict_tail
from workers.engines.capture import LayerRecorder, decoder_blocks, validate_layers
from workers.engines.label_tokens import single_token_ids

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

JudgeMode = Literal["generate", "forced", "calibrated"]
JUDGE_MODES: tuple[str, ...] = ("generate", "forced", "calibrated")


def judge_layers(n_layers: int) -> list[int]:
    """The seed's capture layers for ``L`` blocks: ``{ceil(.25L), ceil(.5L), ceil(.75L), L-1}``.

    These are HF ``hidden_states`` indices (block outputs, never the post-norm last entry).
    """
    wanted = [math.ceil(0.25 * n_layers), math.ceil(0.5 * n_layers), math.ceil(0.75 * n_layers)]
    return sorted({*(x for x in wanted if x >= 1), max(n_layers - 1, 1)})


@dataclass(frozen=True)
class VerdictTokens:
    """Token ids of the verdict labels: ``spaced`` follow ``VERDICT: `` and ``bare`` ``VERDICT:``.

    ``spaced[s]`` / ``bare[s]`` are the ids of slot ``s`` (``A`` or ``B``).
    """

    spaced: dict[str, int]
    bare: dict[str, int]
    prefix: list[int]

    @property
    def all_ids(self) -> list[int]:
        """Every label id: spaced A, spaced B, bare A, bare B."""
        return [self.spaced["A"], self.spaced["B"], self.bare["A"], self.bare["B"]]

    def slot_of(self, token_id: int) -> str | None:
        """The slot a label token names, if it is one."""
        for table in (self.spaced, self.bare):
            for slot, tid in table.items():
                if tid == token_id:
                    return slot
        return None


def verdict_tokens(tokenizer: PreTrainedTokenizerBase) -> VerdictTokens:
    """Check that each verdict label is one token after the prefix, and return the ids.

    Raises
    ------
    ValueError
        If a label is split into several tokens or merges with the prefix.

    """
    tables: dict[str, dict[str, int]] = {}
    for kind, sep in (("spaced", " "), ("bare", "")):
        prefix, ids = single_token_ids(tokenizer, VERDICT_PREFIX, [sep + slot for slot in SLOTS])
        tables[kind] = dict(zip(SLOTS, ids, strict=True))
    if len(set(tables["spaced"].values()) | set(tables["bare"].values())) != 4:
        raise ValueError("verdict labels A and B share a token")
    return VerdictTokens(spaced=tables["spaced"], bare=tables["bare"], prefix=prefix)


@dataclass
class JudgeOutput:
    """One judged item: text, parsed slot, confidence, label logits, captured state, cost.

    ``state`` is ``[n_layers, d_model]`` (float32) at the position before the verdict token, or
    None when nothing was captured (invalid output, or capture off). ``label_logits`` maps slot to
    logit. ``replay_ids`` are the tokens whose last position precedes the verdict (for ``verify``).
    """

    raw_output: str
    slot: str | None
    confidence: float | None
    error: str | None
    label_logits: dict[str, float] | None
    state: np.ndarray | None
    prompt_tokens: int
    output_tokens: int
    seconds: float
    replay_ids: list[int] | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeSettings:
    """How to judge: mode, token budgets, capture layers (None = no capture), batch size."""

    mode: JudgeMode = "generate"
    max_new_tokens: int = 256
    reasoning_tokens: int = 0
    layers: tuple[int, ...] | None = None
    batch_size: int = 4
    # Calibrated mode: the label logits of the content-free prompt, subtracted before the argmax.
    content_free: dict[str, float] | None = None


def _left_pad(
    sequences: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``input_ids``, ``attention_mask`` and ``position_ids`` (``int64[b, t]``), left-padded.

    The mask comes from true lengths (the pad id can be the end-of-turn token), position ids
    from the mask so every token keeps its absolute position.
    """
    import torch

    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, width - len(seq) :] = torch.as_tensor(list(seq), dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def _pad_id(tokenizer: PreTrainedTokenizerBase) -> int:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return int(pad if pad is not None else 0)


def last_position_forward(
    model: PreTrainedModel,
    sequences: Sequence[Sequence[int]],
    *,
    label_ids: Sequence[int],
    layers: Sequence[int] | None,
    pad_id: int,
) -> tuple[np.ndarray, np.ndarray | None]:
    """One forward over left-padded ``sequences``: label logits and layer states at the last token.

    Returns
    -------
    logits : np.ndarray
        ``float32[b, len(label_ids)]``.
    states : np.ndarray or None
        ``float32[b, len(layers), d_model]`` (None when ``layers`` is None).

    """
    import torch

    device = model.get_input_embeddings().weight.device
    recorder = None
    if layers is not None:
        blocks = decoder_blocks(model)
        recorder = LayerRecorder(blocks, validate_layers(layers, len(blocks)), stop=False)
    try:
        ids, mask, positions = _left_pad(sequences, pad_id, device)
        with torch.inference_mode():
            out = model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=False,
                logits_to_keep=1,
            )
        logits = out.logits[:, -1, list(label_ids)].float().cpu().numpy()
        states = None
        if recorder is not None:
            states = torch.stack(list(recorder.kept), dim=1).float().cpu().numpy()  # type: ignore[arg-type]
        return logits, states
    finally:
        if recorder is not None:
            recorder.remove()


class _StepLog:
    """A logits processor that files, per generation step, the label logits and layer states."""

    def __init__(self, recorder: LayerRecorder | None, label_ids: list[int]) -> None:
        self.recorder = recorder
        self.label_ids = label_ids
        self.logits: list[torch.Tensor] = []
        self.states: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch

        self.logits.append(scores[:, self.label_ids].float())
        if self.recorder is not None:
            self.states.append(torch.stack(list(self.recorder.kept), dim=1))  # type: ignore[arg-type]
        return scores


class _StopAtVerdict:
    """Stops a row once it emitted a verdict label right after ``VERDICT:`` (or end of turn)."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, tokens: VerdictTokens, width: int
    ) -> None:
        self.tokenizer = tokenizer
        self.tokens = tokens
        self.width = width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
        import torch

        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        if input_ids.shape[1] <= self.width:
            return done
        last = input_ids[:, -1].tolist()
        for row, token in enumerate(last):
            if self.tokens.slot_of(token) is None:
                continue
            tail = self.tokenizer.decode(input_ids[row, -8:-1].tolist())
            done[row] = tail.rstrip(" ").endswith(VERDICT_PREFIX)
        return done


def _verdict_step(
    tokenizer: PreTrainedTokenizerBase, generated: list[int], tokens: VerdictTokens
) -> int | None:
    """Index of the generated verdict token (a label right after ``VERDICT:``), else None."""
    for k in range(len(generated) - 1, -1, -1):
        if tokens.slot_of(generated[k]) is not None:
            before = tokenizer.decode(generated[max(0, k - 8) : k])
            if before.rstrip(" ").endswith(VERDICT_PREFIX):
                return k
    return None


def _cut_at_end(generated: list[int], stop_ids: set[int], *, keep_end: bool = False) -> list[int]:
    for k, token in enumerate(generated):
        if token in stop_ids:
            return generated[: k + 1] if keep_end else generated[:k]
    return generated


def _stop_ids(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel) -> set[int]:
    ids = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    eos = getattr(model.generation_config, "eos_token_id", None)
    ids.update(eos if isinstance(eos, list) else [eos])
    return {int(i) for i in ids if i is not None}


def _generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    step_log: _StepLog | None,
    stop: _StopAtVerdict | None,
    keep_end: bool = False,
) -> list[list[int]]:
    """Greedy generation for a left-padded batch; the generated ids of each row, cut at EOS.

    With ``keep_end`` the end token that stopped a row is kept as its last id.
    """
    import torch
    from transformers import LogitsProcessorList, StoppingCriteriaList

    device = model.get_input_embeddings().weight.device
    pad_id = _pad_id(tokenizer)
    ids, mask, _ = _left_pad(prompts, pad_id, device)
    stop_ids = _stop_ids(tokenizer, model)
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=pad_id,
            eos_token_id=sorted(stop_ids),
            logits_processor=LogitsProcessorList([step_log] if step_log else []),
            stopping_criteria=StoppingCriteriaList([stop] if stop else []),
        )
    return [_cut_at_end(row[ids.shape[1] :].tolist(), stop_ids, keep_end=keep_end) for row in out]


def generate_greedy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
) -> list[tuple[list[int], int | None]]:
    """Greedy continuations of ``b`` token-id prompts (left-padded), each cut after its end token.

    Returns
    -------
    list of (list of int, int or None)
        Per prompt, the generated ids before the first end token (:func:`_stop_ids`) and that
        end token, or None when the budget ran out first.

    """
    rows = _generate(
        model,
        tokenizer,
        prompts,
        max_new_tokens=max_new_tokens,
        step_log=None,
        stop=None,
        keep_end=True,
    )
    stop_ids = _stop_ids(tokenizer, model)
    return [(r[:-1], r[-1]) if r and r[-1] in stop_ids else (r, None) for r in rows]


@dataclass
class StepTrace:
    """Per-step records of a generation: label logits and layer states of the newest position.

    ``logits[b, k]`` (``float32[b, steps, 4]``, columns = :attr:`VerdictTokens.all_ids`) and
    ``states[b, k]`` (``[b, steps, n_layers, d_model]``, None without capture) belong to the
    forward that produced generated token ``k``: its input ended with the token before ``k``.
    """

    generated: list[list[int]]
    logits: np.ndarray
    states: torch.Tensor | None


def generate_traced(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    layers: Sequence[int] | None,
    stop_at_verdict: bool = True,
) -> StepTrace:
    """Greedy generation that keeps, for every step, the label logits and the layer states.

    Parameters
    ----------
    model, tokenizer
        A loaded causal LM.
    prompts
        ``b`` token-id prompts (left-padded internally).
    max_new_tokens
        Generation budget.
    layers
        Layers to keep per step (HF ``hidden_states`` indices), or None.
    stop_at_verdict
        End a row once it wrote a verdict label after ``VERDICT:``.

    """
    import torch

    tokens = verdict_tokens(tokenizer)
    recorder = None
    if layers is not None:
        blocks = decoder_blocks(model)
        recorder = LayerRecorder(blocks, validate_layers(layers, len(blocks)), stop=False)
    step_log = _StepLog(recorder, tokens.all_ids)
    width = max(len(p) for p in prompts)
    try:
        generated = _generate(
            model,
            tokenizer,
            prompts,
            max_new_tokens=max_new_tokens,
            step_log=step_log,
            stop=_StopAtVerdict(tokenizer, tokens, width) if stop_at_verdict else None,
        )
    finally:
        if recorder is not None:
            recorder.remove()
    logits = torch.stack(step_log.logits, dim=1).cpu().numpy()
    states = torch.stack(step_log.states, dim=1) if step_log.states else None
    return StepTrace(generated, logits, states)


def read_generated(
    tokenizer: PreTrainedTokenizerBase,
    tokens: VerdictTokens,
    prompt: Sequence[int],
    generated: list[int],
    logits: np.ndarray,
    states: torch.Tensor | np.ndarray | None,
) -> JudgeOutput:
    """Parse one generated row strictly and pick the verdict step's logits and state.

    ``logits`` is ``float32[steps, 4]`` and ``states`` ``[steps, n_layers, d_model]`` for this row
    (see :class:`StepTrace`). Timing is left at 0 for the caller to fill in.
    """
    text = tokenizer.decode(generated, skip_special_tokens=True)
    parsed = parse_output(text)
    step = _verdict_step(tokenizer, generated, tokens) if parsed.valid else None
    error = parsed.error
    if parsed.valid and (step is None or tokens.slot_of(generated[step]) != parsed.slot):
        error = "the verdict is not a single label token after VERDICT:"
    label_logits = state = replay = None
    if error is None and step is not None:
        spaced = generated[step] in tokens.spaced.values()
        pair = logits[step, :2] if spaced else logits[step, 2:]
        label_logits = {"A": float(pair[0]), "B": float(pair[1])}
        if states is not None:
            row_state = states[step]
            state = np.asarray(
                row_state.float().cpu().numpy() if hasattr(row_state, "cpu") else row_state,
                dtype=np.float32,
            )
        replay = [*prompt, *generated[:step]]
    return JudgeOutput(
        raw_output=text,
        slot=parsed.slot if error is None else None,
        confidence=parsed.confidence if error is None else None,
        error=error,
        label_logits=label_logits,
        state=state,
        prompt_tokens=len(prompt),
        output_tokens=len(generated),
        seconds=0.0,
        replay_ids=replay,
    )


def judge_generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    settings: JudgeSettings,
) -> list[JudgeOutput]:
    """Judge one batch by greedy generation and a strict parse, capturing before the verdict.

    Parameters
    ----------
    model, tokenizer
        A loaded causal LM.
    prompts
        ``b`` rendered chat prompts (token ids, generation prompt opened).
    settings
        ``max_new_tokens`` and ``layers`` (capture) are used.

    """
    tokens = verdict_tokens(tokenizer)
    started = time.perf_counter()
    trace = generate_traced(
        model, tokenizer, prompts, max_new_tokens=settings.max_new_tokens, layers=settings.layers
    )
    per_item = (time.perf_counter() - started) / len(prompts)
    outputs = []
    for row, gen in enumerate(trace.generated):
        states = None if trace.states is None else trace.states[row]
        out = read_generated(tokenizer, tokens, prompts[row], gen, trace.logits[row], states)
        out.seconds = per_item
        outputs.append(out)
    return outputs


def judge_forced(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    settings: JudgeSettings,
) -> list[JudgeOutput]:
    """Judge one batch by forced choice: optional reasoning, then ``VERDICT:`` and the label argmax.

    The verdict is whichever of the two (spaced) label tokens has the larger logit after the
    appended prefix, so every item gets a valid choice; the confidence is parsed from the
    reasoning when it contains a ``CONFIDENCE`` line. See :func:`judge_generate` for parameters.
    """
    tokens = verdict_tokens(tokenizer)
    started = time.perf_counter()
    reasoning = [""] * len(prompts)
    if settings.reasoning_tokens > 0:
        generated = _generate(
            model,
            tokenizer,
            prompts,
            max_new_tokens=settings.reasoning_tokens,
            step_log=None,
            stop=None,
        )
        reasoning = [
            strip_verdict_tail(tokenizer.decode(g, skip_special_tokens=True)).rstrip()
            for g in generated
        ]
    sequences = []
    for prompt, text in zip(prompts, reasoning, strict=True):
        tail = (text + "\n" if text else "") + VERDICT_PREFIX
        sequences.append([*prompt, *tokenizer(tail, add_special_tokens=False)["input_ids"]])
    logits, states = last_position_forward(
        model,
        sequences,
        label_ids=[tokens.spaced["A"], tokens.spaced["B"]],
        layers=settings.layers,
        pad_id=_pad_id(tokenizer),
    )
    per_item = (time.perf_counter() - started) / len(prompts)
    outputs = []
    for row, text in enumerate(reasoning):
        slot = "A" if logits[row, 0] >= logits[row, 1] else "B"
        confidence = parse_output(f"{text}\nVERDICT: {slot}").confidence if text else None
        outputs.append(
            JudgeOutput(
                raw_output=(text + "\n" if text else "") + f"{VERDICT_PREFIX} {slot}",
                slot=slot,
                confidence=confidence,
                error=None,
                label_logits={"A": float(logits[row, 0]), "B": float(logits[row, 1])},
                state=None if states is None else states[row],
                prompt_tokens=len(prompts[row]),
                output_tokens=len(sequences[row]) - len(prompts[row]),
                seconds=per_item,
                replay_ids=sequences[row],
            )
        )
    return outputs


def judge_batch(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    settings: JudgeSettings,
) -> list[JudgeOutput]:
    """Judge one batch in ``settings.mode``."""
    if settings.mode == "forced":
        return judge_forced(model, tokenizer, prompts, settings)
    if settings.mode == "calibrated":
        if settings.content_free is None:
            raise ValueError("calibrated judging needs the content-free label logits")
        outputs = judge_forced(model, tokenizer, prompts, settings)
        return [calibrate(out, settings.content_free) for out in outputs]
    if settings.mode == "generate":
        return judge_generate(model, tokenizer, prompts, settings)
    raise ValueError(f"unknown judge mode {settings.mode!r}; use one of {JUDGE_MODES}")


def content_free_logits(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt: Sequence[int]
) -> dict[str, float]:
    """Verdict-label logits of a content-free prompt (the same template with "N/A" everywhere).

    They measure the judge's prior for each slot regardless of the responses: small models put
    nearly all their mass on the first-shown slot (SmolLM2 chose slot A on every JudgeBench pair
    we tried), which makes every pair a flip and leaves nothing to predict.
    """
    (out,) = judge_forced(model, tokenizer, [prompt], JudgeSettings(mode="forced"))
    assert out.label_logits is not None
    return out.label_logits


def calibrate(out: JudgeOutput, content_free: dict[str, float]) -> JudgeOutput:
    """Contextual calibration (Zhao et al., 2021): the argmax of label logits minus the prior.

    The stored ``label_logits`` become the calibrated ones (they decided the verdict); the raw
    logits and the content-free prior are kept in ``details``.
    """
    assert out.label_logits is not None
    raw = out.label_logits
    calibrated = {s: raw[s] - content_free[s] for s in SLOTS}
    slot = "A" if calibrated["A"] >= calibrated["B"] else "B"
    head = out.raw_output[: out.raw_output.rfind(VERDICT_PREFIX)]
    return JudgeOutput(
        **{
            **out.__dict__,
            "slot": slot,
            "label_logits": calibrated,
            "raw_output": f"{head}{VERDICT_PREFIX} {slot}",
            "details": {**out.details, "raw_logits": raw, "content_free_logits": content_free},
        }
    )


def length_buckets(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first), to limit padding."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def verify_replay(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    outputs: Sequence[JudgeOutput],
    layers: Sequence[int],
) -> list[dict[str, Any]]:
    """Replay judged items one by one with a teacher-forced forward up to the verdict token.

    Returns one record per output with ``argmax_matches`` (the greedy argmax over the two labels,
    after the content-free prior for calibrated outputs, equals the recorded slot) and
    ``max_abs_diff`` between replayed and recorded states.
    """
    tokens = verdict_tokens(tokenizer)
    records = []
    for out in outputs:
        if out.replay_ids is None or out.slot is None:
            records.append({"argmax_matches": None, "max_abs_diff": None})
            continue
        logits, states = last_position_forward(
            model,
            [out.replay_ids],
            label_ids=[tokens.spaced["A"], tokens.spaced["B"]],
            layers=layers,
            pad_id=_pad_id(tokenizer),
        )
        prior = out.details.get("content_free_logits") or {"A": 0.0, "B": 0.0}
        slot = "A" if logits[0, 0] - prior["A"] >= logits[0, 1] - prior["B"] else "B"
        diff = None
        if out.state is not None and states is not None:
            diff = float(np.max(np.abs(states[0] - out.state)))
        records.append({"argmax_matches": slot == out.slot, "max_abs_diff": diff})
    return records
