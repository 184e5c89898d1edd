"""The context audit of a judge job: a pair made longer than the budget is refused and counted.

A tiny random Llama with SmolLM2's tokenizer and chat template judges the shortest real
JudgeBench pairs; one of them gets a response repeated until it no longer fits. Token counts
are checked against the tokenizer's own chat template, applied here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select
from transformers import AutoTokenizer

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.judgebench import import_judgebench
from app.services.jobs.judge import JudgeParams
from app.services.jobs.judge_protocol import VERDICT_PREFIX, JudgePrompt
from app.settings import Settings
from app.store import Store
from app.tables import Instance, Judgment
from tests.support.job_support import register_tiny, run_job, store_on
from tests.support.short_pairs import shortest_pairs


@pytest.fixture
def store(settings: Settings, engine: Any, tiny_model_dir: Path, tmp_path: Path) -> Store:
    store = store_on(settings, engine)
    register_tiny(store, tiny_model_dir)
    path = shortest_pairs(tmp_path / "pairs", 4)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    rows[0]["response_A"] = " ".join([rows[0]["response_A"]] * 12)  # the pair made too long
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with transaction(store.factory) as s:
        import_judgebench(s, [path], benchmark="jb")
    return store


def _needs(store: Store, model_dir: Path) -> dict[str, int]:
    """Per pair: tokens of its longer order under the template, plus the forced-mode tail."""
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    tail = len(tok("\n" + VERDICT_PREFIX, add_special_tokens=False)["input_ids"])
    out = {}
    with transaction(store.factory) as s:
        for external_id, p in s.execute(select(Instance.external_id, Instance.payload)):
            lengths = [
                len(
                    tok.apply_chat_template(
                        JudgePrompt().messages(p["prompt"], p["response_a"], p["response_b"], o),
                        add_generation_prompt=True,
                        tokenize=True,
                        return_dict=True,
                    )["input_ids"]
                )
                for o in ("AB", "BA")
            ]
            out[external_id] = max(lengths) + tail
    return out


def test_a_pair_over_the_budget_is_refused_counted_and_never_judged(
    store: Store, tiny_model_dir: Path
) -> None:
    needs = _needs(store, tiny_model_dir)
    long_id = max(needs, key=needs.__getitem__)
    others = sorted(v for k, v in needs.items() if k != long_id)
    budget = others[-1]  # every other pair fits exactly; the long one does not
    assert needs[long_id] > budget
    params = JudgeParams("jb", "tiny", mode="forced", context_budget=budget)
    result = run_job(store, "judge", params.as_dict())
    audit = result["context_audit"]
    assert (audit["pairs"], audit["refused_pairs"], audit["refused_units"]) == (4, 1, 2)
    assert audit["retained_pairs"] == 3 and audit["retention"] == 0.75
    assert audit["budget"] == budget and audit["window"] == 4096
    with transaction(store.factory) as s:
        judged = {
            (e, o)
            for e, o in s.execute(
                select(Instance.external_id, Judgment.order).join(
                    Instance, Instance.id == Judgment.instance_id
                )
            )
        }
        long_iid = s.scalar(select(Instance.id).where(Instance.external_id == long_id))
    assert audit["refused_ids"] == [long_iid]
    assert {e for e, _ in judged} == set(needs) - {long_id}  # never judged, not truncated
    assert len(judged) == 6 and result["retained_pairs"] == 3
    # The retention curve: at each pair's need, the share of pairs that fit (a direct count).
    values = np.array(sorted(needs.values()))
    want = [[int(v), float(np.mean(values <= v))] for v in np.unique(values)]
    assert audit["curve"] == want


def test_a_budget_needs_a_local_tokenizer() -> None:
    with pytest.raises(InvalidInput, match="local model's tokenizer"):
        JudgeParams(
            "jb", "m", backend="remote", base_url="http://x", mode="generate", context_budget=10
        )
    with pytest.raises(InvalidInput, match="at least 1 token"):
        JudgeParams("jb", "m", context_budget=0)
