"""The choice-answering job on a tiny model: one prediction per item, option probabilities, states.

The model is a random Llama with SmolLM2's tokenizer: what it answers does not matter here, only
that every item gets one prediction whose probabilities are the softmax of its option letters'
logits, and that the captured state is the residual stream before the answer letter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import delete, select

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.evidence.activation_sets import get_activation_set
from app.services.jobs import queue as job_queue
from app.services.jobs.answer import (
    ANSWER_PREFIX,
    ChoiceParams,
    activation_set_name,
)
from app.services.jobs.kind import enqueue
from app.settings import Settings
from app.store import Store
from app.tables import Detector, Instance, Prediction
from tests.conftest import DATA
from tests.support.job_support import register_tiny, run_queue, store_on
from workers.engines.activations import read_activation_set
from workers.engines.capture import render_chat
from workers.engines.models import load_model
from workers.jobs.answer import option_probabilities

SUBJECT = DATA / "mmlu-redux" / "astronomy.csv"


@pytest.fixture
def store(settings: Settings, engine: Any, tiny_model_dir: Path) -> Store:
    store = store_on(settings, engine)
    register_tiny(store, tiny_model_dir)
    with transaction(store.factory) as s:
        import_mmlu_redux(s, [SUBJECT], "mmlu")
    return store


def _answer(store: Store, **kw: Any) -> dict[str, Any]:
    with transaction(store.factory) as s:
        job_id = enqueue(s, ChoiceParams(benchmark="mmlu", model="tiny", **kw)).id
    assert run_queue(store) == 1
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
        assert job.status == "done", job.error
        return dict(job.result or {})


def _predictions(store: Store) -> dict[int, Prediction]:
    with transaction(store.factory) as s:
        rows = s.scalars(
            select(Prediction)
            .join(Detector, Detector.id == Prediction.detector_id)
            .where(Detector.name == "tiny/choice")
        )
        out = {p.instance_id: p for p in rows}
        for p in out.values():
            s.expunge(p)
    return out


def test_every_item_once_with_probabilities_and_the_state_before_the_letter(
    store: Store, tiny_model_dir: Path
) -> None:
    result = _answer(store, limit=12, batch_size=5)
    assert result["items"] == 12 and result["activation_set"] == "choice:tiny/choice:mmlu"
    found = _predictions(store)
    assert len(found) == 12
    for p in found.values():
        assert set(p.probabilities) == {"A", "B", "C", "D"}
        assert abs(sum(p.probabilities.values()) - 1.0) < 1e-9
        assert p.answer == max(p.probabilities, key=p.probabilities.get)
    with transaction(store.factory) as s:
        aset = get_activation_set(s, activation_set_name(ChoiceParams("mmlu", "tiny")))
        payloads = dict(s.execute(select(Instance.id, Instance.payload)).all())
    arr = read_activation_set(store.settings.data_dir, aset)
    assert sorted(arr.instance_ids) == sorted(found)
    # Reference: one unpadded forward per item with output_hidden_states, read at the last token.
    import torch

    loaded = load_model(tiny_model_dir, device="cpu", dtype="float32")
    tok = loaded.tokenizer
    letters = [
        tok(ANSWER_PREFIX + " " + c, add_special_tokens=False)["input_ids"][-1] for c in "ABCD"
    ]
    params = ChoiceParams("mmlu", "tiny")
    for row, iid in enumerate(arr.instance_ids):
        ids = render_chat(
            tok,
            [{"role": "user", "content": params.user_message(payloads[iid])}],
            add_generation_prompt=True,
            prefill=ANSWER_PREFIX,
        )
        with torch.inference_mode():
            out = loaded.model(torch.tensor([ids]), output_hidden_states=True)
        want = np.stack([out.hidden_states[layer][0, -1].numpy() for layer in arr.layers])
        np.testing.assert_allclose(arr.values[row], want, atol=1e-4, rtol=1e-4)
        logits = out.logits[0, -1, letters].double().numpy()
        expected = option_probabilities(logits[None, :], [4])[0]
        got = np.array([found[iid].probabilities[c] for c in "ABCD"])
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_a_rerun_answers_only_what_is_missing(store: Store) -> None:
    _answer(store, limit=6, batch_size=4)
    first = _predictions(store)
    with transaction(store.factory) as s:
        s.execute(delete(Prediction).where(Prediction.instance_id.in_(sorted(first)[:2])))
    again = _answer(store, limit=6, batch_size=4)
    second = _predictions(store)
    assert again["items"] == 6 and sorted(second) == sorted(first)
    for iid in sorted(first)[2:]:
        assert second[iid].id == first[iid].id  # untouched rows
    with transaction(store.factory) as s:
        aset = get_activation_set(s, "choice:tiny/choice:mmlu")
    ids = read_activation_set(store.settings.data_dir, aset).instance_ids
    assert len(ids) == len(set(ids)) == 6


def test_option_probabilities_use_each_items_own_letters() -> None:
    logits = np.array([[1.0, 2.0, 3.0, 50.0], [0.0, 0.0, 0.0, 0.0]])
    three, four = option_probabilities(logits, [3, 4])
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(three, e / e.sum())
    np.testing.assert_allclose(four, [0.25] * 4)


def test_bad_parameters_are_refused(store: Store) -> None:
    with transaction(store.factory) as s:
        for kw, field in (
            ({"template": "no placeholders"}, "template"),
            ({"template": "{question} {options} {nope}"}, "template"),
            ({"batch_size": 0}, "batch_size"),
        ):
            with pytest.raises(InvalidInput) as caught:
                enqueue(s, ChoiceParams(benchmark="mmlu", model="tiny", **kw))
            assert caught.value.field == field
