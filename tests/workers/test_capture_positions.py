"""Positions in a chat captured in one pass, against a per-item ``output_hidden_states`` forward.

The statement's end, the end of turn, every response token and a generated follow-up answer.

Most checks run a random 4-block Llama with SmolLM2's real tokenizer and chat template
(``tiny_model_dir``); one short check runs the real SmolLM2.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from workers.engines.capture import _first_tensor, decoder_blocks, render_chat  # noqa: E402
from workers.engines.positions import (  # noqa: E402
    POSITIONS,
    Layout,
    ResponseTokens,
    capture_positions,
    chat_layout,
    parse_span_rule,
    text_layout,
)
from workers.engines.replies import DID_YOU_LIE, generate_replies  # noqa: E402

CHATS = [
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Is Paris the capital of France?"},
        {"role": "assistant", "content": "Yes, Paris is the capital of France."},
    ],
    [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "It is 5."},
    ],
    [
        {"role": "system", "content": "Always lie."},
        {"role": "user", "content": "Name the chemical symbol of gold, and say it twice."},
        {"role": "assistant", "content": "The symbol of gold is Ag. Again: Ag, as in silver."},
    ],
    [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help you today?"},
    ],
    [
        {"role": "user", "content": "Translate 'gato'."},
        {"role": "assistant", "content": "Cat, as in the animal."},
    ],
]
ONE_TOKEN = [
    {"role": "user", "content": "Translate 'gato'."},
    {"role": "assistant", "content": "Cat"},
]
RULES = {
    "statement_end": POSITIONS["statement_end"],
    "end_of_turn": POSITIONS["end_of_turn"],
    "response": POSITIONS["response"],
    "response:-2": ResponseTokens(2),
    "response_first": POSITIONS["response_first"],
}


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    # The saved init is small; a larger scale keeps activations far from zero so errors show.
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.3)
    return model, tok


def reference(model: Any, ids: tuple[int, ...], layers: list[int]) -> np.ndarray:
    """One unpadded item: ``hidden_states[i]`` for i < L, block L-1's output (a hook) for L.

    Returns ``[n_layers, len(ids), d]``.
    """
    blocks = decoder_blocks(model)
    last: dict[str, Any] = {}
    handle = blocks[-1].register_forward_hook(lambda _m, _a, o: last.update(out=_first_tensor(o)))
    try:
        with torch.no_grad():
            out = model(torch.tensor([list(ids)]), output_hidden_states=True, use_cache=False)
    finally:
        handle.remove()
    hs = out.hidden_states
    return torch.stack([(hs[i] if i < len(blocks) else last["out"])[0] for i in layers]).numpy()


def check_against_reference(model: Any, layouts: list[Layout], got: dict, layers: list[int]):
    refs = [reference(model, layout.ids, layers) for layout in layouts]
    for name, cap in got.items():
        rows = cap.rows
        assert rows.values.shape[1:] == (len(layers), model.config.hidden_size)
        assert rows.n_items == len(layouts)
        for i, layout in enumerate(layouts):
            lo, hi = rows.offsets[i], rows.offsets[i + 1]
            want_pos = RULES[name].resolve(layout) if name in RULES else None
            if want_pos is not None:
                np.testing.assert_array_equal(cap.positions[lo:hi], want_pos)
            want = refs[i][:, cap.positions[lo:hi], :].transpose(1, 0, 2)
            np.testing.assert_allclose(rows.values[lo:hi], want, atol=1e-4, rtol=0)
            assert np.abs(want).max() > 0.1


def test_layouts_locate_the_response_and_its_end_of_turn(tiny: tuple[Any, Any]):
    _, tok = tiny
    for chat in CHATS:
        layout = chat_layout(tok, chat)
        span = tok.decode(list(layout.ids[layout.response_start : layout.response_end]))
        assert span.strip() == chat[-1]["content"]
        assert layout.end_of_turn == layout.response_end  # <|im_end|> right after the content
        assert layout.ids[layout.end_of_turn] == tok.eos_token_id
        assert list(layout.ids) == render_chat(tok, chat)
    located = chat_layout(tok, CHATS[2], statement="The symbol of gold is Ag.")
    span = tok.decode(list(located.ids[located.response_start : located.response_end]))
    assert span.strip() == "The symbol of gold is Ag."
    assert located.end_of_turn > located.response_end  # the rest of the reply comes first
    with pytest.raises(ValueError, match="not in the last message"):
        chat_layout(tok, CHATS[2], statement="Au")
    plain = text_layout(tok, "The city of Oslo is in Norway.")
    assert tok.decode(list(plain.ids[plain.response_start : plain.response_end])) == (
        "The city of Oslo is in Norway."
    )
    assert plain.end_of_turn is None


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_every_position_equals_a_per_item_forward(tiny: tuple[Any, Any], padding_side: str):
    model, tok = tiny
    layouts = [chat_layout(tok, chat) for chat in CHATS]
    layers = [4, 0, 2]  # L = 4 is block 3's output, not the post-norm hidden_states[-1]
    got = capture_positions(
        model,
        layouts,
        RULES,
        layers=layers,
        batch_size=2,
        padding_side=padding_side,
        pad_token_id=tok.pad_token_id,  # = <|im_end|>, the end-of-turn token read here
    )
    check_against_reference(model, layouts, got, layers)
    n_tokens = got["response"].rows.n_tokens
    np.testing.assert_array_equal(n_tokens - 2, got["response:-2"].rows.n_tokens)
    np.testing.assert_array_equal(
        n_tokens, [lay.response_end - lay.response_start for lay in layouts]
    )


def test_one_forward_per_batch_and_no_block_past_the_deepest(tiny: tuple[Any, Any]):
    model, tok = tiny
    calls: list[int] = []
    handle = model.base_model.register_forward_pre_hook(lambda _m, _a: calls.append(1))
    blocks_run: list[int] = []
    deep = decoder_blocks(model)[3].register_forward_hook(lambda *_: blocks_run.append(1))
    try:
        layouts = [chat_layout(tok, chat) for chat in CHATS]
        capture_positions(model, layouts, RULES, layers=[1, 3], batch_size=2)
    finally:
        handle.remove()
        deep.remove()
    assert len(calls) == 3  # 5 items in batches of 2, every rule read in the same forward
    assert blocks_run == []  # layer 3 is block 2's output: block 3 never runs


def test_rules_refuse_what_they_cannot_read(tiny: tuple[Any, Any]):
    model, tok = tiny
    short = chat_layout(tok, ONE_TOKEN)
    assert short.response_end - short.response_start == 1
    # A response no longer than the tokens left out keeps its first token (a one-word answer).
    got = capture_positions(model, [short], {"response:-3": ResponseTokens(3)}, layers=[1])
    assert got["response:-3"].positions.tolist() == [short.response_start]
    empty = replace(short, response_end=short.response_start)
    with pytest.raises(ValueError, match="item 0, position rule 'response:-3'"):
        capture_positions(model, [empty], {"response:-3": ResponseTokens(3)}, layers=[1])
    plain = text_layout(tok, "Oslo is in Norway.")
    with pytest.raises(ValueError, match="end-of-turn"):
        capture_positions(model, [plain], {"eot": POSITIONS["end_of_turn"]}, layers=[1])
    assert parse_span_rule("response:-5") == ResponseTokens(5)
    for bad in ("response:5", "middle"):
        with pytest.raises(ValueError):
            parse_span_rule(bad)


def test_follow_up_answer_is_generated_then_captured(tiny: tuple[Any, Any]):
    model, tok = tiny
    chats = CHATS[:3]
    replies = generate_replies(model, tok, chats, follow_up=DID_YOU_LIE, max_new_tokens=4)
    for chat, reply in zip(chats, replies, strict=True):
        prompt = render_chat(
            tok, [*chat, {"role": "user", "content": DID_YOU_LIE}], add_generation_prompt=True
        )
        lay = reply.layout
        assert list(lay.ids[: lay.response_start]) == prompt
        assert lay.ids[lay.response_start : lay.response_end] == reply.answer_ids
        assert len(reply.answer_ids) >= 1
        # On-policy: the first answer token is the greedy choice of an unpadded forward.
        with torch.no_grad():
            logits = model(torch.tensor([prompt])).logits[0, -1]
        assert int(logits.argmax()) == reply.answer_ids[0]
        assert reply.messages[-2]["content"] == DID_YOU_LIE
    layouts = [r.layout for r in replies]
    rules = {k: RULES[k] for k in ("response_first", "response")}
    got = capture_positions(model, layouts, rules, layers=[1, 4], batch_size=2)
    check_against_reference(model, layouts, got, [1, 4])


@pytest.mark.slow
def test_smollm2_follow_up_answer_and_statement_positions(smollm2_dir: Path):
    from workers.engines.models import load_model

    loaded = load_model(smollm2_dir, device="cpu", dtype="float32")
    model, tok = loaded.model, loaded.tokenizer
    (reply,) = generate_replies(model, tok, [CHATS[1]], follow_up=DID_YOU_LIE, max_new_tokens=3)
    assert reply.answer_ids and reply.text.strip()
    # The follow-up transcript holds the original chat too; one item keeps the check short.
    layouts = [reply.layout]
    names = ("statement_end", "response_first", "response", "end_of_turn")
    rules = {k: RULES[k] for k in names if k != "end_of_turn" or reply.ended}
    layers = [0, 15, 30]
    # One item per forward: the same kernels as the reference, so 1e-4 holds on values of a few
    # hundred (padded batches round differently, ~2e-4 here; the tiny model checks padding).
    got = capture_positions(model, layouts, rules, layers=layers, batch_size=1)
    check_against_reference(model, layouts, got, layers)
