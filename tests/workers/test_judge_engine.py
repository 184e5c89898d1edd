"""The local judge on the real SmolLM2: verdict tokens, in-generation capture, forced choice.

In-generation capture must equal a teacher-forced replay of the same prefix (pitfall 9) at every
step, and the forced-choice state must equal the capture engine's at the last token.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.services.jobs.judge_protocol import JudgePrompt
from tests.support.numerics import assert_close_to_scale
from workers.engines.capture import LastToken, capture, render_chat
from workers.engines.judge import (
    JudgeSettings,
    generate_traced,
    judge_forced,
    judge_layers,
    last_position_forward,
    length_buckets,
    read_generated,
    verdict_tokens,
    verify_replay,
)
from workers.engines.models import LoadedModel, load_model

pytestmark = pytest.mark.slow
LAYERS = judge_layers(30)


@pytest.fixture(scope="module")
def smollm2(smollm2_dir: Path) -> LoadedModel:
    return load_model(smollm2_dir, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def prompts(smollm2: LoadedModel) -> list[list[int]]:
    judge = JudgePrompt()
    pairs = [
        ("What is 2 + 2?", "4", "5"),
        ("Name the capital of France.", "Paris is the capital.", "Lyon, I think, or maybe Nice."),
    ]
    return [
        render_chat(smollm2.tokenizer, judge.messages(*pair, "AB"), add_generation_prompt=True)
        for pair in pairs
    ]


def test_judge_layers_follow_the_seed():
    assert judge_layers(30) == [8, 15, 23, 29]
    assert judge_layers(32) == [8, 16, 24, 31]
    assert judge_layers(4) == [1, 2, 3]  # tiny models: duplicates collapse


def test_verdict_labels_are_single_tokens(smollm2: LoadedModel):
    tokens = verdict_tokens(smollm2.tokenizer)
    tok = smollm2.tokenizer
    assert tok.decode([tokens.spaced["A"]]) == " A" and tok.decode([tokens.bare["B"]]) == "B"
    assert tokens.slot_of(tokens.spaced["B"]) == "B" and tokens.slot_of(tokens.prefix[0]) is None


def test_in_generation_capture_equals_teacher_forced_replay(
    smollm2: LoadedModel, prompts: list[list[int]]
):
    trace = generate_traced(
        smollm2.model,
        smollm2.tokenizer,
        prompts,
        max_new_tokens=6,
        layers=LAYERS,
        stop_at_verdict=False,
    )
    tokens = verdict_tokens(smollm2.tokenizer)
    assert trace.states is not None
    for row, prompt in enumerate(prompts):
        generated = trace.generated[row]
        assert generated, "the model must generate something"
        for k in range(len(generated)):
            logits, states = last_position_forward(
                smollm2.model,
                [[*prompt, *generated[:k]]],
                label_ids=tokens.all_ids,
                layers=LAYERS,
                pad_id=0,
            )
            assert states is not None
            # Left-padded, cached generation vs one unpadded forward: float rounding only.
            assert_close_to_scale(states[0], trace.states[row, k].numpy())
            np.testing.assert_allclose(logits[0], trace.logits[row, k], atol=1e-3, rtol=1e-5)


def test_read_generated_picks_the_verdict_step(smollm2: LoadedModel, prompts: list[list[int]]):
    tok = smollm2.tokenizer
    tokens = verdict_tokens(tok)
    text = "A is right.\nCONFIDENCE: 70\nVERDICT: B"
    generated = [*tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id]
    steps = len(generated)
    logits = np.arange(steps * 4, dtype=np.float32).reshape(steps, 4)
    states = np.random.default_rng(0).normal(size=(steps, 4, 8)).astype(np.float32)
    out = read_generated(tok, tokens, prompts[0], generated[:-1], logits, states)
    k = len(generated) - 2  # the " B" token
    assert (out.slot, out.confidence, out.error) == ("B", 70.0, None)
    assert out.label_logits == {"A": float(logits[k, 0]), "B": float(logits[k, 1])}
    np.testing.assert_array_equal(out.state, states[k])
    assert out.replay_ids == [*prompts[0], *generated[:k]]
    bad = tok("VERDICT: B", add_special_tokens=False)["input_ids"]
    out = read_generated(tok, tokens, prompts[0], bad, logits, states)
    assert out.slot is None and out.state is None and "CONFIDENCE" in (out.error or "")


def test_forced_choice_state_is_the_capture_at_the_verdict_prefix(
    smollm2: LoadedModel, prompts: list[list[int]]
):
    settings = JudgeSettings(mode="forced", layers=tuple(LAYERS))
    outputs = judge_forced(smollm2.model, smollm2.tokenizer, prompts, settings)
    tokens = verdict_tokens(smollm2.tokenizer)
    for out, prompt in zip(outputs, prompts, strict=True):
        assert out.replay_ids == [*prompt, *tokens.prefix]
        want = capture(smollm2.model, [out.replay_ids], positions=LastToken(), layers=LAYERS)
        assert out.state is not None
        assert_close_to_scale(out.state, want[0])
        assert out.label_logits is not None
        assert out.slot == max(out.label_logits, key=lambda s: out.label_logits[s])  # type: ignore[index]
        assert out.raw_output == f"VERDICT: {out.slot}" and out.confidence is None
    checks = verify_replay(smollm2.model, smollm2.tokenizer, outputs, LAYERS)
    assert all(c["argmax_matches"] for c in checks)
    assert max(c["max_abs_diff"] for c in checks) < 1e-3


def test_length_buckets_group_similar_lengths():
    assert length_buckets([5, 100, 7, 90, 6], 2) == [[1, 3], [2, 4], [0]]
