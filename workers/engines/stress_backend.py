"""The model under test as the stress-set builders need it: sampled replies and reply likelihoods.

:class:`LocalBackend` runs a loaded Hugging Face model (any local model, CPU or GPU);
:class:`RemoteBackend` asks an OpenAI-compatible chat-completions server (e.g. vLLM serving the
same weights) for sampled replies. Log-likelihoods always come from local weights.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from app.ingest.lie.stress import Message
from workers.engines.capture import render_chat
from workers.engines.judge import _cut_at_end, _left_pad, _pad_id, _stop_ids
from workers.engines.models import LoadedModel
from workers.engines.remote_judge import API_KEY_ENV


def response_span(
    loaded: LoadedModel, messages: Sequence[Message], response: str
) -> tuple[list[int], int, int]:
    """Token ids of the chat with ``response`` as the reply, and the reply's ``[start, end)``.

    The span starts after the opened assistant turn and ends before the end-of-turn token the
    template closes the reply with (so the token that closes the turn is not scored).

    Raises
    ------
    ValueError
        If the rendered chat with the reply does not extend the opened assistant turn.

    """
    tok = loaded.tokenizer
    prompt = render_chat(tok, messages, add_generation_prompt=True)
    full = render_chat(tok, [*messages, {"role": "assistant", "content": response}])
    if full[: len(prompt)] != prompt:
        raise ValueError("the chat template renders the reply without the opened assistant turn")
    end = len(full)
    eos = tok.eos_token_id
    while end > len(prompt) and (
        full[end - 1] == eos or not tok.decode(full[end - 1 : end]).strip()
    ):
        end -= 1  # the closing end-of-turn token and the template's trailing newline
    return full, len(prompt), end


@dataclass
class LocalBackend:
    """A loaded model: batched sampling (temperature 1) or greedy decoding, and likelihoods."""

    loaded: LoadedModel
    batch_size: int = 8

    def generate(
        self, chats: Sequence[Sequence[Message]], *, temperature: float, max_tokens: int, seed: int
    ) -> list[str]:
        """One reply per chat: greedy at ``temperature`` 0, else plain sampling (no top-k/p)."""
        import torch

        tok, model = self.loaded.tokenizer, self.loaded.model
        device = model.get_input_embeddings().weight.device
        stop_ids = _stop_ids(tok, model)
        pad = _pad_id(tok)
        torch.manual_seed(seed)
        out: list[str] = []
        prompts = [render_chat(tok, c, add_generation_prompt=True) for c in chats]
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start : start + self.batch_size]
            ids, mask, _ = _left_pad(batch, pad, device)
            sampling = (
                {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
                if temperature > 0
                else {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
            )
            with torch.inference_mode():
                gen = model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=max_tokens,
                    pad_token_id=pad,
                    eos_token_id=sorted(stop_ids),
                    **sampling,
                )
            for row in gen:
                tokens = _cut_at_end(row[ids.shape[1] :].tolist(), stop_ids)
                out.append(tok.decode(tokens, skip_special_tokens=True))
        return out

    def loglik(
        self, chats: Sequence[Sequence[Message]], responses: Sequence[str]
    ) -> list[tuple[float, int]]:
        """Summed log-probabilities of each reply's tokens given its chat (fp32 softmax)."""
        import torch

        model = self.loaded.model
        device = model.get_input_embeddings().weight.device
        spans = [response_span(self.loaded, c, r) for c, r in zip(chats, responses, strict=True)]
        out: list[tuple[float, int]] = []
        for start in range(0, len(spans), self.batch_size):
            batch = spans[start : start + self.batch_size]
            ids, mask, positions = _left_pad(
                [s[0] for s in batch], _pad_id(self.loaded.tokenizer), device
            )
            with torch.inference_mode():
                logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
            logp = torch.log_softmax(logits.float(), dim=-1)
            width = ids.shape[1]
            for row, (full, a, b) in enumerate(batch):
                shift = width - len(full)  # left padding
                # Token t is predicted by the logits at t - 1.
                targets = torch.as_tensor(full[a:b], device=device)
                rows = torch.arange(a - 1, b - 1, device=device) + shift
                values = logp[row, rows, targets]
                out.append((float(values.sum()), int(b - a)))
        return out


@dataclass
class RemoteBackend:
    """Sampled replies from an OpenAI-compatible server (``/chat/completions``)."""

    base_url: str
    model: str
    concurrency: int = 4
    timeout: float = 600.0

    def generate(
        self, chats: Sequence[Sequence[Message]], *, temperature: float, max_tokens: int, seed: int
    ) -> list[str]:
        """One reply per chat; each request carries its own seed (``seed + k``)."""
        headers = {}
        if key := os.environ.get(API_KEY_ENV):
            headers["Authorization"] = f"Bearer {key}"
        client = httpx.Client(
            base_url=self.base_url.rstrip("/"), headers=headers, timeout=self.timeout
        )

        def one(k: int) -> str:
            request = {
                "model": self.model,
                "messages": list(chats[k]),
                "max_tokens": max_tokens,
                "temperature": temperature,
                "seed": seed + k,
            }
            response = client.post("/chat/completions", json=request)
            response.raise_for_status()
            return str(response.json()["choices"][0]["message"]["content"] or "")

        with client, ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(one, range(len(chats))))

    def loglik(
        self, chats: Sequence[Sequence[Message]], responses: Sequence[str]
    ) -> list[tuple[float, int]]:
        """Not served by a chat API: score with a :class:`LocalBackend` of the same weights."""
        raise NotImplementedError("reply log-likelihoods need the local weights")
