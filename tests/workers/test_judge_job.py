"""Judge and extract jobs end to end through the worker, on a tiny model, on both dialects.

The model is a random 2-block Llama with SmolLM2's tokenizer: what it says does not matter here,
only that every unit is judged once, mapped to identities, captured and written idempotently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import delete, func, select

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.ingest.statements import import_statements
from app.services.evidence.activation_sets import get_activation_set
from app.services.jobs import queue as job_queue
from app.services.jobs.extract import ExtractParams
from app.services.jobs.judge import JudgeParams
from app.services.jobs.kind import enqueue
from app.settings import Settings
from app.store import Store
from app.tables import Instance, Judgment, LabelEvent
from tests.conftest import DATA
from tests.support.job_support import register_tiny, run_queue, store_on
from workers.engines.activations import read_activation_set
from workers.engines.capture import EndOfTurn, capture, render_chat
from workers.engines.judge import judge_layers
from workers.engines.models import load_model
from workers.jobs.judge import activation_set_name

PAIRS = sorted((DATA / "judgebench").glob("dataset=judgebench,*.jsonl"))[0]


@pytest.fixture
def store(settings: Settings, engine: Any, tiny_model_dir: Path) -> Store:
    store = store_on(settings, engine)
    register_tiny(store, tiny_model_dir)
    with transaction(store.factory) as s:
        import_judgebench(s, PAIRS, benchmark="jb")
    return store


_run = run_queue


def _judge(store: Store, **kw: Any) -> int:
    params = JudgeParams(benchmark="jb", model="tiny", **kw)
    with transaction(store.factory) as s:
        return enqueue(s, params).id


def _judgments(store: Store) -> list[Judgment]:
    with transaction(store.factory) as s:
        return list(s.scalars(select(Judgment).order_by(Judgment.instance_id, Judgment.order)))


def test_forced_judge_job_writes_every_unit_once_with_activations(store: Store):
    job_id = _judge(store, mode="forced", limit=6, repeat_subset=2, batch_size=4, verify=2)
    assert _run(store) == 1
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
        assert job.status == "done", job.error
        result = job.result
        assert result is not None
        aset = get_activation_set(s, activation_set_name(JudgeParams("jb", "tiny", mode="forced")))
        flips = s.scalar(select(func.count()).where(LabelEvent.label_name == "flip:tiny/forced"))
    assert (job.progress_done, job.progress_total) == (14, 14)
    assert result["by_order"] == {"AB": 6, "BA": 6, "AB-repeat": 2}
    assert result["repeat_control"] == {"compared": 2, "changed": 0}
    assert result["retained_pairs"] == 6 and flips == 6
    assert result["verify"]["checked"] == 2 and result["verify"]["argmax_matches"] == 2
    rows = _judgments(store)
    assert len({(j.instance_id, j.order) for j in rows}) == len(rows) == 14
    for j in rows:
        slot = j.details["slot"]
        # BA shows B first, so its slot A is identity B; logits are stored by identity.
        assert j.choice == (slot if j.order != "BA" else {"A": "B", "B": "A"}[slot])
        assert j.verdict_logits is not None and j.mode == "forced"
        assert max(j.verdict_logits, key=j.verdict_logits.get) == j.choice
        assert (j.activation_ref is not None) == (j.order == "AB")
    arr = read_activation_set(store.settings.data_dir, aset)
    assert arr.values.shape == (6, len(judge_layers(4)), 32)
    assert sorted(arr.instance_ids) == sorted(j.instance_id for j in rows if j.order == "AB")


def test_a_rerun_only_judges_what_is_missing(store: Store):
    _judge(store, mode="forced", limit=4)
    _run(store)
    first = {(j.instance_id, j.order): j.id for j in _judgments(store)}
    with transaction(store.factory) as s:  # as if the job died before these two were written
        gone = sorted(first)[:2]
        s.execute(delete(Judgment).where(Judgment.id.in_([first[k] for k in gone])))
    job_id = _judge(store, mode="forced", limit=4)
    _run(store)
    again = {(j.instance_id, j.order): j.id for j in _judgments(store)}
    assert set(again) == set(first) and len(again) == 8
    assert all(again[k] == first[k] for k in first if k not in gone)  # untouched rows stay
    with transaction(store.factory) as s:
        assert job_queue.get_job(s, job_id).progress_done == 8
        aset = get_activation_set(s, activation_set_name(JudgeParams("jb", "tiny", mode="forced")))
    ids = read_activation_set(store.settings.data_dir, aset).instance_ids
    assert len(ids) == len(set(ids)) == 4  # the re-judged AB state was not stored twice


def test_generate_mode_records_malformed_output_as_invalid(store: Store):
    job_id = _judge(store, mode="generate", limit=2, max_new_tokens=4)
    _run(store)
    with transaction(store.factory) as s:
        result = job_queue.get_job(s, job_id).result
    assert result is not None and result["retained_pairs"] == 0
    rows = _judgments(store)
    assert len(rows) == 4
    for j in rows:  # a random model never writes the format
        assert j.choice == "invalid" and j.details["parse_error"] and j.activation_ref is None
        assert j.output_tokens is not None and 0 < j.output_tokens <= 4


def test_bad_input_fails_the_job_at_once_with_the_field(store: Store):
    with transaction(store.factory) as s:
        import_statements(s, DATA / "truth" / "cities.csv", benchmark="cities")
        params = ExtractParams(benchmark="cities", model="tiny", assistant_field="nope", limit=2)
        job_id = enqueue(s, params).id
    _run(store)
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
    # Retrying cannot fix the input: one attempt, and the message names the field.
    assert (job.status, job.attempts) == ("failed", 1)
    assert "question" in (job.error or "") or "nope" in (job.error or "")


def test_extract_job_equals_direct_capture(store: Store, tiny_model_dir: Path):
    with transaction(store.factory) as s:
        import_statements(s, DATA / "truth" / "cities.csv", benchmark="cities")
        enqueue(
            s,
            ExtractParams(
                benchmark="cities",
                model="tiny",
                format="chat",
                user_field="statement",
                assistant_field="country",
                limit=10,
                batch_size=3,
            ),
        )
    assert _run(store) == 1
    with transaction(store.factory) as s:
        (job,) = job_queue.list_jobs(s)
        assert job.status == "done", job.error
        aset = get_activation_set(s, job.result["activation_set"])  # type: ignore[index]
        payloads = {i: p for i, p in s.execute(select(Instance.id, Instance.payload))}
    arr = read_activation_set(store.settings.data_dir, aset)
    loaded = load_model(tiny_model_dir, device="cpu", dtype="float32")
    tok = loaded.tokenizer
    chats = [
        render_chat(
            tok,
            [
                {"role": "user", "content": payloads[i]["statement"]},
                {"role": "assistant", "content": payloads[i]["country"]},
            ],
        )
        for i in arr.instance_ids
    ]
    want = capture(loaded.model, chats, positions=EndOfTurn(tok.eos_token_id), layers=arr.layers)
    assert arr.values.shape == (10, 3, 32)
    np.testing.assert_allclose(arr.values, want, atol=1e-5)


def test_calibrated_mode_subtracts_the_content_free_prior(store: Store):
    _judge(store, mode="calibrated", limit=4, batch_size=8, verify=2)
    assert _run(store) == 1
    rows = _judgments(store)
    assert len(rows) == 8 and {j.mode for j in rows} == {"calibrated"}
    verified = [j.details["verify"] for j in rows if "verify" in j.details]
    assert len(verified) == 2 and all(v["argmax_matches"] for v in verified)
    priors = {j.order: j.details["content_free_logits"] for j in rows}
    assert set(priors) == {"AB", "BA"}
    for j in rows:
        raw, prior = j.details["raw_logits"], j.details["content_free_logits"]
        slot = "A" if raw["A"] - prior["A"] >= raw["B"] - prior["B"] else "B"
        assert j.details["slot"] == slot
        # Stored by identity: the BA order's slot A is response B.
        calibrated = {"A": raw["A"] - prior["A"], "B": raw["B"] - prior["B"]}
        if j.order == "BA":
            calibrated = {"A": calibrated["B"], "B": calibrated["A"]}
        assert j.verdict_logits == pytest.approx(calibrated)
