"""The remote judge: response parsing, and a local OpenAI-compatible server over SmolLM2.

Through the server, the remote backend must produce exactly what the local judge produces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from app.db import session_factory, transaction
from app.ingest.judgebench import import_judgebench
from app.services.jobs import queue as job_queue
from app.services.jobs.judge import JudgeParams
from app.services.jobs.judge_results import Unit
from app.services.jobs.kind import enqueue
from app.settings import Settings
from app.store import Store
from app.tables import Instance, Judgment
from tests.support.live_server import serve_app
from tests.support.short_pairs import shortest_pairs
from workers.dispatch import HANDLERS
from workers.engines.capture import render_chat
from workers.engines.judge import JudgeSettings, judge_generate
from workers.engines.models import LoadedModel, load_model
from workers.engines.openai_server import create_openai_app
from workers.engines.remote_judge import read_completion, verdict_scores
from workers.runner import Worker


def _entry(token: str, logprob: float, top: list[tuple[str, float]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "token": token,
        "logprob": logprob,
        "top_logprobs": [{"token": t, "logprob": v} for t, v in top],
    }


def _response(text: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A chat-completions body as hosted APIs return it."""
    return {
        "choices": [
            {
                "message": {"role": "assistant", "content": text},
                "logprobs": {"content": entries},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": len(entries)},
    }


def test_verdict_scores_come_from_the_verdict_token():
    entries = [
        _entry("CONFIDENCE", -0.1),
        _entry(":", -0.1),
        _entry(" 70", -0.2),
        _entry("\n", -0.1),
        _entry("VERDICT", -0.1),
        _entry(":", -0.1),
        _entry(" B", -0.3, [(" B", -0.3), (" A", -1.5), ("B", -4.0)]),
    ]
    out = read_completion(_response("CONFIDENCE: 70\nVERDICT: B", entries), 0.5)
    assert (out.slot, out.confidence, out.error) == ("B", 70.0, None)
    assert out.label_logits == {"B": -0.3, "A": -1.5}
    assert out.state is None and out.output_tokens == 7 and out.prompt_tokens == 120
    # A label missing from the alternatives gives no scores, never a made-up one.
    assert verdict_scores([_entry("VERDICT:", -0.1), _entry(" A", -0.01, [(" A", -0.01)])]) == (
        None,
        1,
    )
    bad = read_completion(_response("I pick A", [_entry("I", -1.0)]), 0.1)
    assert bad.slot is None and "VERDICT" in (bad.error or "")


@pytest.fixture(scope="module")
def smollm2(smollm2_dir: Path) -> LoadedModel:
    return load_model(smollm2_dir, device="cpu", dtype="float32")


@pytest.mark.slow
@pytest.mark.one_dialect("sqlite")
def test_remote_judging_against_a_smollm2_server_matches_local_judging(
    settings: Settings, engine: Any, smollm2: LoadedModel, tmp_path: Path
):
    store = Store(settings=settings, engine=engine, factory=session_factory(engine))
    with transaction(store.factory) as s:
        import_judgebench(s, [shortest_pairs(tmp_path / "pairs", 4)], benchmark="jb")
    with serve_app(create_openai_app(smollm2, "smollm2")) as url:
        assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "smollm2"
        params = JudgeParams(
            benchmark="jb", model="smollm2", backend="remote", base_url=f"{url}/v1",
            limit=2, max_new_tokens=12, batch_size=2,
        )  # fmt: skip
        with transaction(store.factory) as s:
            job_id = enqueue(s, params).id  # no registered model needed
        Worker(store, HANDLERS, log=lambda _: None).run(once=True)
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
        rows = list(
            s.execute(select(Judgment, Instance.payload).join(Instance).order_by(Judgment.id))
        )
    assert job.status == "done", job.error
    assert len(rows) == 4 and {j.order for j, _ in rows} == {"AB", "BA"}
    units = [
        Unit(j.instance_id, j.order, p["prompt"], p["response_a"], p["response_b"]) for j, p in rows
    ]
    prompts = [
        render_chat(
            smollm2.tokenizer,
            params.prompt.messages(u.prompt, u.response_a, u.response_b, u.order),
            add_generation_prompt=True,
        )
        for u in units
    ]
    local = judge_generate(
        smollm2.model, smollm2.tokenizer, prompts, JudgeSettings(max_new_tokens=12)
    )
    for (judgment, _), mine, prompt in zip(rows, local, prompts, strict=True):
        assert judgment.raw_output == mine.raw_output  # same model, same greedy text
        assert judgment.choice == ("invalid" if mine.slot is None else judgment.choice)
        assert judgment.activation_ref is None and judgment.mode == "generate"
        assert judgment.prompt_tokens == len(prompt)
