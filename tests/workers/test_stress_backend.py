"""The stress backend on the tiny model: reply log-likelihoods equal a per-item forward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from app.ingest.lie.datasets import read_statement_rows, truth_file
from app.ingest.lie.stress import (
    ASSISTANT_SYSTEM,
    QUIZ_SYSTEM,
    StressOptions,
    default_beliefs,
    yes_no_questions,
)
from tests.conftest import DATA
from workers.engines.capture import render_chat
from workers.engines.models import load_model
from workers.engines.stress_backend import LocalBackend


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Path) -> LocalBackend:
    return LocalBackend(load_model(tiny_model_dir, device="cpu", dtype="float32"), batch_size=3)


def _reference(loaded: Any, messages: list[dict[str, str]], response: str) -> tuple[float, int]:
    """One unpadded forward; the reply = the tokens the assistant content adds before <|im_end|>."""
    tok = loaded.tokenizer
    prompt = render_chat(tok, messages, add_generation_prompt=True)
    reply = tok(response, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + reply])
    with torch.inference_mode():
        logp = torch.log_softmax(loaded.model(input_ids=ids).logits.float(), -1)[0]
    total = sum(float(logp[len(prompt) + k - 1, t]) for k, t in enumerate(reply))
    return total, len(reply)


def test_loglik_equals_a_per_item_forward(backend: LocalBackend):
    history = [{"role": "user", "content": "Question 1: Is ice cold?"},
               {"role": "assistant", "content": "No."}]  # fmt: skip
    chats = [
        [{"role": "system", "content": ASSISTANT_SYSTEM}, {"role": "user", "content": "Hi?"}],
        [{"role": "system", "content": QUIZ_SYSTEM}, *history,
         {"role": "user", "content": "Wrong answer - you win 1 point! Is fire hot?"}],
        [{"role": "user", "content": "Is it true that 2 + 2 = 4?"}],
    ]  # fmt: skip
    replies = ["Yes, hello there.", "Yes.", "No, it is five."]
    got = backend.loglik(chats, replies)  # batched, left-padded
    for (value, n), chat, reply in zip(got, chats, replies, strict=True):
        ref, ref_n = _reference(backend.loaded, chat, reply)
        assert n == ref_n and value == pytest.approx(ref, abs=1e-3)


def test_default_beliefs_keep_an_honest_sample_and_count_every_drop(backend: LocalBackend):
    questions = yes_no_questions(read_statement_rows(truth_file(DATA, "cities")))[:3]
    honest, rejected = default_beliefs(backend, questions, StressOptions(samples=3, max_tokens=6))
    assert len(honest) + sum(rejected.values()) == 3
    assert set(rejected) <= {"default belief unclear", "default belief contradicts the truth"}
