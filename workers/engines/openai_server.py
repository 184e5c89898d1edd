"""A small OpenAI-compatible chat-completions server over a registered local model.

Enough of the API for the remote judge: greedy decoding, ``max_tokens``, ``logprobs`` with
``top_logprobs``, usage counts, and ``GET /v1/models``. It lets a team try remote judging against
the demo model, and is what the remote backend's tests talk to. Requests are served one at a
time (one model, one device).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from workers.engines.capture import render_chat
from workers.engines.models import LoadedModel


class ChatMessage(BaseModel):
    """One message of the conversation."""

    role: str
    content: str


class ChatRequest(BaseModel):
    """The subset of the chat-completions request this server honours."""

    model: str
    messages: list[ChatMessage]
    max_tokens: int = Field(256, ge=1, le=4096)
    temperature: float = 0.0
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0, le=20)


def _completion(loaded: LoadedModel, req: ChatRequest) -> dict[str, Any]:
    import torch

    tok = loaded.tokenizer
    ids = render_chat(tok, [m.model_dump() for m in req.messages], add_generation_prompt=True)
    device = loaded.model.get_input_embeddings().weight.device
    prompt = torch.tensor([ids], device=device)
    with torch.inference_mode():
        out = loaded.model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=req.max_tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            output_scores=True,
            return_dict_in_generate=True,
        )
    generated = out.sequences[0, len(ids) :].tolist()
    stop = {tok.eos_token_id, tok.pad_token_id}
    finish = "length"
    for k, token in enumerate(generated):
        if token in stop:
            generated, finish = generated[:k], "stop"
            break
    choice: dict[str, Any] = {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": tok.decode(generated, skip_special_tokens=True),
        },
        "finish_reason": finish,
    }
    if req.logprobs:
        entries = []
        for k, token in enumerate(generated):
            logp = torch.log_softmax(out.scores[k][0].float(), dim=-1)
            top = torch.topk(logp, req.top_logprobs) if req.top_logprobs else None
            entries.append(
                {
                    "token": tok.decode([token]),
                    "logprob": float(logp[token]),
                    "top_logprobs": []
                    if top is None
                    else [
                        {"token": tok.decode([int(i)]), "logprob": float(v)}
                        for v, i in zip(top.values.tolist(), top.indices.tolist(), strict=True)
                    ],
                }
            )
        choice["logprobs"] = {"content": entries}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(ids),
            "completion_tokens": len(generated),
            "total_tokens": len(ids) + len(generated),
        },
    }


def create_openai_app(loaded: LoadedModel, name: str) -> FastAPI:
    """An app serving ``loaded`` under the model id ``name``."""
    app = FastAPI(title=f"Appellate OpenAI-compatible server ({name})")
    lock = threading.Lock()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "local"}]}

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest) -> dict[str, Any]:
        if req.model != name:
            raise HTTPException(404, f"model {req.model!r} is not served here (only {name!r})")
        if req.temperature != 0:
            raise HTTPException(400, "only greedy decoding (temperature 0) is served")
        with lock:  # one model on one device: one generation at a time
            return _completion(loaded, req)

    return app
