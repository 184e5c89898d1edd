"""The critic's engines: a local transformers model (forced or generated verdict) or a server.

A verdict label's score is its largest logit over its two spellings (after ``VERDICT: `` and
after ``VERDICT:``) at the verdict position; the remote engine takes the label's best
log-probability over the returned alternatives, which is the same up to one constant per
position. The probabilities are the softmax of those scores over the three labels
(:func:`app.services.jobs.critic_protocol.verdict_probabilities`).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import numpy as np

from app.services.jobs.critic import CriticParams
from app.services.jobs.critic_protocol import VERDICT_PREFIX, VERDICTS, parse_verdict
from app.services.jobs.critic_protocol import verdict_probabilities as softmax_labels
from app.services.jobs.critic_results import CriticItem, CriticVerdict
from workers.engines.capture import render_chat
from workers.engines.judge import (
    VerdictTokens,
    generate_traced,
    last_position_forward,
    verdict_step,
    verdict_tokens,
)
from workers.engines.models import LoadedModel
from workers.engines.remote_judge import chat_completion, openai_client, verdict_scores

# OpenAI's maximum: the more alternatives, the likelier all three labels are among them.
TOP_LOGPROBS = 20
NOT_A_LABEL_TOKEN = "the verdict is not a single label token after VERDICT:"


class CriticEngine(Protocol):
    """A critic backend: turns items into verdicts."""

    def describe(self) -> dict[str, Any]:
        """Details stored on the critic's detector."""
        ...

    def lengths(self, items: Sequence[CriticItem]) -> list[int]:
        """A size per item for length bucketing."""
        ...

    def critique(self, items: Sequence[CriticItem]) -> list[CriticVerdict]:
        """The verdicts of one batch."""
        ...


def label_scores(logits: np.ndarray, tokens: VerdictTokens) -> np.ndarray:
    """Each label's score: its larger logit over the spaced and bare spellings.

    Parameters
    ----------
    logits : ndarray of float, shape (..., 2 * n_labels)
        Logits of :attr:`VerdictTokens.all_ids` (spaced labels, then bare ones).
    tokens
        The verdict tokens (``n_labels`` labels).

    Returns
    -------
    ndarray of float64, shape (..., n_labels)

    """
    n = len(tokens.labels)
    z = np.asarray(logits, dtype=np.float64)
    return np.maximum(z[..., :n], z[..., n:])


def _probabilities(scores: np.ndarray, labels: Sequence[str]) -> dict[str, float]:
    return softmax_labels(dict(zip(labels, scores.tolist(), strict=True)))


@dataclass
class LocalCritic:
    """A transformers model on this worker's device, in ``forced`` or ``generate`` mode."""

    loaded: LoadedModel
    params: CriticParams
    tokens: VerdictTokens = field(init=False)
    _prompts: dict[int, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tokens = verdict_tokens(self.loaded.tokenizer, VERDICTS)
        self._template_kwargs = self.loaded.info.template_kwargs

    def describe(self) -> dict[str, Any]:
        """Details stored on the critic's detector."""
        return {
            "backend": "local",
            "model": self.params.model,
            "fingerprint": self.loaded.info.fingerprint,
            "mode": self.params.mode,
            "template": self.params.template,
            "system": self.params.system,
            "verdicts": list(VERDICTS),
        }

    def ids(self, item: CriticItem) -> list[int]:
        """Token ids of the item's chat with the assistant turn opened."""
        if item.instance_id not in self._prompts:
            self._prompts[item.instance_id] = render_chat(
                self.loaded.tokenizer,
                item.messages,
                add_generation_prompt=True,
                **self._template_kwargs,
            )
        return self._prompts[item.instance_id]

    def lengths(self, items: Sequence[CriticItem]) -> list[int]:
        """Prompt length per item, for length bucketing."""
        return [len(self.ids(i)) for i in items]

    def critique(self, items: Sequence[CriticItem]) -> list[CriticVerdict]:
        """The verdicts of one batch in the job's mode."""
        prompts = [self.ids(i) for i in items]
        if self.params.mode == "forced":
            return self._forced(items, prompts)
        return self._generate(items, prompts)

    def _pad_id(self) -> int:
        tok = self.loaded.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        return int(pad if pad is not None else 0)

    def _forced(
        self, items: Sequence[CriticItem], prompts: Sequence[list[int]]
    ) -> list[CriticVerdict]:
        """The reply prefilled with ``VERDICT:``; one forward scores the labels."""
        sequences = [[*p, *self.tokens.prefix] for p in prompts]
        logits, _ = last_position_forward(
            self.loaded.model,
            sequences,
            label_ids=self.tokens.all_ids,
            layers=None,
            pad_id=self._pad_id(),
        )
        scores = label_scores(logits, self.tokens)
        out = []
        for item, prompt, row in zip(items, prompts, scores, strict=True):
            verdict = self.tokens.labels[int(np.argmax(row))]
            out.append(
                CriticVerdict(
                    item.instance_id,
                    f"{VERDICT_PREFIX} {verdict}",
                    verdict,
                    None,
                    _probabilities(row, self.tokens.labels),
                    "logits",
                    len(prompt),
                    len(self.tokens.prefix),
                )
            )
        return out

    def _generate(
        self, items: Sequence[CriticItem], prompts: Sequence[list[int]]
    ) -> list[CriticVerdict]:
        """Greedy generation, a strict parse, and the labels' logits at the verdict step."""
        tok = self.loaded.tokenizer
        trace = generate_traced(
            self.loaded.model,
            tok,
            prompts,
            max_new_tokens=self.params.max_new_tokens,
            layers=None,
            tokens=self.tokens,
        )
        out = []
        for row, (item, prompt) in enumerate(zip(items, prompts, strict=True)):
            generated = trace.generated[row]
            text = tok.decode(generated, skip_special_tokens=True)
            parsed = parse_verdict(text)
            error, probabilities = parsed.error, None
            if parsed.valid:
                step = verdict_step(tok, generated, self.tokens)
                if step is None or self.tokens.slot_of(generated[step]) != parsed.verdict:
                    error = NOT_A_LABEL_TOKEN
                else:
                    scores = label_scores(trace.logits[row, step], self.tokens)
                    probabilities = _probabilities(scores, self.tokens.labels)
            out.append(
                CriticVerdict(
                    item.instance_id,
                    text,
                    parsed.verdict if error is None else None,
                    error,
                    probabilities,
                    "logits" if probabilities is not None else None,
                    len(prompt),
                    len(generated),
                )
            )
        return out


def label_logprobs(entry: dict[str, Any]) -> tuple[dict[str, float], float]:
    """The verdict labels' best log-probabilities at one position, and the lowest one listed.

    Parameters
    ----------
    entry
        One ``logprobs.content`` entry: the generated token and its ``top_logprobs``.

    Returns
    -------
    found : dict
        ``{label: logprob}`` of the labels among the token and its alternatives (each label's
        best spelling: spaced or bare).
    floor : float
        The smallest log-probability listed: a label left out has at most this one.

    """
    alternatives = [entry, *entry.get("top_logprobs", [])]
    found: dict[str, float] = {}
    for alt in alternatives:
        label, value = str(alt.get("token", "")).strip(), float(alt["logprob"])
        if label in VERDICTS and value > found.get(label, -np.inf):
            found[label] = value
    return found, min(float(alt["logprob"]) for alt in alternatives)


def missing_bound(found: dict[str, float], floor: float) -> float:
    """How far the labels left out can move P(defect) from its value over the found ones.

    Each missing label has probability at most ``exp(floor)``; adding a mass ``m`` to the
    softmax's denominator (and at most ``m`` to its numerator) moves a ratio by at most
    ``m / (T + m) <= m / T``, with ``T`` the found labels' total probability.
    """
    missing = len(VERDICTS) - len(found)
    total = sum(np.exp(v) for v in found.values())
    return float(min(1.0, missing * np.exp(floor) / total)) if missing else 0.0


def read_critique(instance_id: int, body: dict[str, Any]) -> CriticVerdict:
    """A verdict from one chat-completions response: strict parse, label log-probabilities.

    The labels' log-probabilities are read at the verdict token; a label missing from the top
    list is left out of the softmax, recorded, and its effect bounded (:func:`missing_bound`).
    Without log-probabilities (a server that returns none) there are no probabilities.
    """
    choice = body["choices"][0]
    text = choice["message"].get("content") or ""
    parsed = parse_verdict(text)
    entries = (choice.get("logprobs") or {}).get("content") or []
    probabilities, missing, bound = None, (), 0.0
    if parsed.valid:
        _, at = verdict_scores(entries, VERDICTS)
        if at is not None:
            found, floor = label_logprobs(entries[at])
            probabilities = softmax_labels(found)
            missing = tuple(v for v in VERDICTS if v not in found)
            bound = missing_bound(found, floor)
    usage = body.get("usage") or {}
    return CriticVerdict(
        instance_id,
        text,
        parsed.verdict,
        parsed.error,
        probabilities,
        "logprobs" if probabilities is not None else None,
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or len(entries)),
        missing,
        bound,
    )


@dataclass
class RemoteCritic:
    """Calls ``{base_url}/chat/completions`` with greedy decoding, ``batch_size`` at a time."""

    params: CriticParams
    client: httpx.Client

    @classmethod
    def from_params(cls, params: CriticParams) -> RemoteCritic:
        """A critic on the job's server; the API key (if any) comes from the environment."""
        return cls(params, openai_client(params.base_url or ""))

    def describe(self) -> dict[str, Any]:
        """Details stored on the critic's detector."""
        return {
            "backend": "remote",
            "base_url": self.params.base_url,
            "model": self.params.model,
            "mode": self.params.mode,
            "template": self.params.template,
            "system": self.params.system,
            "verdicts": list(VERDICTS),
        }

    def lengths(self, items: Sequence[CriticItem]) -> list[int]:
        """Characters per item: the server tokenizes, so text length stands in for tokens."""
        return [sum(len(m["content"]) for m in i.messages) for i in items]

    def _one(self, item: CriticItem) -> CriticVerdict:
        body, _seconds = chat_completion(
            self.client,
            self.params.model,
            item.messages,
            self.params.max_new_tokens,
            top_logprobs=TOP_LOGPROBS,
        )
        return read_critique(item.instance_id, body)

    def critique(self, items: Sequence[CriticItem]) -> list[CriticVerdict]:
        """The verdicts of one batch, by concurrent requests (the server batches them)."""
        with ThreadPoolExecutor(max_workers=self.params.batch_size) as pool:
            return list(pool.map(self._one, items))
