"""The judge protocol against an OpenAI-compatible chat-completions server (vLLM, Ollama, APIs).

Verdicts come from the strict parse of the returned text; verdict scores from the log-probability
entries of the verdict token (log-probabilities differ from logits by one constant per position,
so margins between the labels are the same). No activations: those need the local weights.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from app.services.jobs.judge import JudgeParams
from app.services.jobs.judge_protocol import SLOTS, VERDICT_PREFIX, parse_output
from app.services.jobs.judge_results import Unit
from workers.engines.judge import JudgeOutput

API_KEY_ENV = "APPELLATE_REMOTE_API_KEY"
TOP_LOGPROBS = 10


def verdict_scores(
    entries: Sequence[dict[str, Any]], labels: Sequence[str] = SLOTS
) -> tuple[dict[str, float] | None, int | None]:
    """Label log-probabilities at the verdict token of a ``logprobs.content`` list.

    The verdict token is the last entry whose text is a label (``A``/``B`` for the judge,
    optionally spaced) right after ``VERDICT:``; the score of each label is its best
    log-probability among that position's alternatives (a label absent from the top list gets
    none: returns None).

    Returns
    -------
    scores : dict or None
        ``{label: logprob}``, e.g. ``{"A": -0.2, "B": -1.7}``.
    index : int or None
        Position of the verdict token in ``entries``.

    """
    texts = [str(e.get("token", "")) for e in entries]
    for k in range(len(entries) - 1, -1, -1):
        if texts[k].strip() not in labels:
            continue
        if not "".join(texts[max(0, k - 8) : k]).rstrip(" ").endswith(VERDICT_PREFIX):
            continue
        found: dict[str, float] = {}
        alternatives = [entries[k], *entries[k].get("top_logprobs", [])]
        for alt in alternatives:
            label = str(alt.get("token", "")).strip()
            if label in labels and label not in found:
                found[label] = float(alt["logprob"])
        return (found if len(found) == len(labels) else None), k
    return None, None


def read_completion(body: dict[str, Any], seconds: float) -> JudgeOutput:
    """A judge output from one chat-completions response (strict parse, verdict scores)."""
    choice = body["choices"][0]
    text = choice["message"].get("content") or ""
    parsed = parse_output(text)
    entries = (choice.get("logprobs") or {}).get("content") or []
    scores, _ = verdict_scores(entries) if parsed.valid else (None, None)
    usage = body.get("usage") or {}
    return JudgeOutput(
        raw_output=text,
        slot=parsed.slot if parsed.valid else None,
        confidence=parsed.confidence,
        error=parsed.error,
        label_logits=scores,
        state=None,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or len(entries)),
        seconds=seconds,
        details={"verdict_scores": "logprobs", "finish_reason": choice.get("finish_reason")},
    )


def openai_client(base_url: str, *, timeout: float = 600.0) -> httpx.Client:
    """A client of the server at ``base_url``; the API key (if any) comes from the environment."""
    headers = {}
    key = os.environ.get(API_KEY_ENV)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)


def chat_completion(
    client: httpx.Client,
    model: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    *,
    top_logprobs: int = TOP_LOGPROBS,
) -> tuple[dict[str, Any], float]:
    """One greedy chat completion with the top log-probabilities; the body and its seconds.

    Raises
    ------
    httpx.HTTPStatusError
        When the server refuses the request.

    """
    request = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": top_logprobs,
    }
    started = time.perf_counter()
    response = client.post("/chat/completions", json=request)
    response.raise_for_status()
    return response.json(), time.perf_counter() - started


@dataclass
class RemoteEngine:
    """Calls ``{base_url}/chat/completions`` with greedy decoding, ``batch_size`` at a time."""

    params: JudgeParams
    client: httpx.Client
    layers: list[int] | None = None

    @classmethod
    def from_params(cls, params: JudgeParams, *, timeout: float = 600.0) -> RemoteEngine:
        """An engine for the job's server; the API key (if any) comes from the environment."""
        return cls(params, openai_client(params.base_url or "", timeout=timeout))

    def describe(self) -> dict[str, Any]:
        """Details stored on the judge detector."""
        return {
            "backend": "remote",
            "base_url": self.params.base_url,
            "model": self.params.model,
            "mode": self.params.mode,
            "template": self.params.template,
            "system": self.params.system,
        }

    def lengths(self, units: Sequence[Unit]) -> list[int]:
        """Characters per unit: the server tokenizes, so text length stands in for tokens."""
        return [len(u.prompt) + len(u.response_a) + len(u.response_b) for u in units]

    def _one(self, unit: Unit) -> JudgeOutput:
        messages = self.params.prompt.messages(
            unit.prompt, unit.response_a, unit.response_b, unit.order
        )
        body, seconds = chat_completion(
            self.client, self.params.model, messages, self.params.max_new_tokens
        )
        return read_completion(body, seconds)

    def judge(self, units: Sequence[Unit]) -> list[JudgeOutput]:
        """Judge one batch with concurrent requests (the server batches them)."""
        with ThreadPoolExecutor(max_workers=self.params.batch_size) as pool:
            return list(pool.map(self._one, units))

    def verify(self, outputs: Sequence[JudgeOutput]) -> list[dict[str, Any]]:
        """Nothing to replay without the weights."""
        return [{"argmax_matches": None, "max_abs_diff": None} for _ in outputs]
