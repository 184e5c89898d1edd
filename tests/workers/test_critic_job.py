"""The critic job: a tiny model's bad outputs, the real SmolLM2 locally and through a server.

A critic's probability must be the softmax of the verdict labels' logits read from a forward of
the model computed here, independently of the engine (plain ``model(...)`` on the unpadded
chat, the label ids tokenized here); an output without a valid verdict is counted and gets no
score. The remote critic reads the probabilities from the stand-in server's top logprobs; a
label absent from them is named and left out, within the bound the critic states.

SmolLM2 answers the MMLU question instead of writing a verdict line whatever the template (a
135M model is no critic), so generation is checked on items that ask it to copy a verdict line:
it copies some exactly and misspells others ("VERDICT: Invalid"), which must not be scored.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from app.db import transaction
from app.ingest.mmlu_redux import import_mmlu_redux
from app.ingest.table import import_table
from app.services.evidence.labels import current_labels
from app.services.jobs import queue as job_queue
from app.services.jobs.critic import CriticParams
from app.services.jobs.critic_protocol import VERDICTS
from app.services.jobs.judge_sampling import seeded_rank
from app.services.jobs.kind import enqueue
from app.settings import Settings
from app.store import Store
from app.tables import Detector, Instance, Score
from tests.conftest import DATA
from tests.support.job_support import register_tiny, run_queue, store_on
from tests.support.live_server import serve_app
from workers.engines.critic import TOP_LOGPROBS
from workers.engines.models import LoadedModel, load_model
from workers.engines.openai_server import create_openai_app

pytestmark = pytest.mark.slow
SUBJECT = DATA / "mmlu-redux" / "astronomy.csv"
# (id, question, labelled answer) shown as "{question} {key}": SmolLM2 copies the first line
# exactly and writes "VERDICT: Invalid" for the second.
COPY_ITEMS = [
    ("c1", "Copy this:", "VERDICT: correct"),
    ("c2", "Copy this line:", "VERDICT: invalid"),
]
COPY = {"benchmark": "copy", "model": "smollm2", "mode": "generate", "system": ""}
COPY_TEMPLATE = "{question} {key}"
BUDGET = 8
LINE = re.compile(r"(?:^|\n)[ \t]*VERDICT: ?(correct|wrong|invalid)[ \t]*$")


@pytest.fixture(scope="module")
def smollm2(smollm2_dir: Path) -> LoadedModel:
    return load_model(smollm2_dir, device="cpu", dtype="float32")


@pytest.fixture
def store(settings: Settings, engine: Any, smollm2_dir: Path, tiny_model_dir: Path) -> Store:
    store = store_on(settings, engine)
    register_tiny(store, tiny_model_dir)
    register_tiny(store, smollm2_dir, name="smollm2")
    with transaction(store.factory) as s:
        import_mmlu_redux(s, [SUBJECT], "mmlu")
    return store


def _queue(store: Store, **kw: Any) -> tuple[CriticParams, int]:
    params = CriticParams(**{"benchmark": "mmlu", **kw})
    with transaction(store.factory) as s:
        return params, enqueue(s, params).id


def _result(store: Store, job_id: int) -> dict[str, Any]:
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
    assert job.status == "done", job.error
    return dict(job.result or {})


def _scores(store: Store, detector: str) -> dict[int, tuple[float, dict[str, Any], Any, str]]:
    """A detector's scores: instance id -> (score, details, payload, labelled answer)."""
    with transaction(store.factory) as s:
        rows = s.execute(
            select(Score.instance_id, Score.score, Score.details, Instance.payload)
            .join(Detector, Detector.id == Score.detector_id)
            .join(Instance, Instance.id == Score.instance_id)
            .where(Detector.name == detector)
        ).all()
        keys = current_labels(s, [r[0] for r in rows], ["reference"])
    return {i: (sc, d, p, keys[i]["reference"]) for i, sc, d, p in rows}


def _sample(store: Store, n: int, seed: int) -> set[int]:
    """The ids of the seeded sample a run with ``limit=n`` asks when nothing scored the items."""
    with transaction(store.factory) as s:
        rows = s.execute(select(Instance.id, Instance.external_id)).all()
    return {i for i, _ in sorted(rows, key=lambda r: seeded_rank(seed, r[1]))[:n]}


def _label_ids(tok: Any) -> dict[str, list[int]]:
    """Each verdict's token ids after "VERDICT: " and after "VERDICT:", tokenized here."""
    n = len(tok("VERDICT:", add_special_tokens=False)["input_ids"])
    out = {}
    for v in VERDICTS:
        ids = [tok(f"VERDICT:{sep}{v}", add_special_tokens=False)["input_ids"] for sep in (" ", "")]
        assert all(len(x) == n + 1 for x in ids)
        out[v] = [x[-1] for x in ids]
    return out


def _chat_ids(loaded: LoadedModel, params: CriticParams, payload: Any, key: str) -> list[int]:
    tok = loaded.tokenizer
    text = tok.apply_chat_template(
        params.messages(payload, key), tokenize=False, add_generation_prompt=True
    )
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _logits(loaded: LoadedModel, ids: list[int]) -> np.ndarray:
    """Next-token logits after ``ids`` from one unpadded forward (float64, the whole vocabulary)."""
    import torch

    with torch.inference_mode():
        return loaded.model(torch.tensor([ids])).logits[0, -1].double().numpy()


def _softmax(scores: dict[str, float]) -> dict[str, float]:
    z = np.array(list(scores.values()))
    p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    return dict(zip(scores, p.tolist(), strict=True))


def _reference(loaded: LoadedModel, logits: np.ndarray, top: int | None = None) -> dict[str, float]:
    """Softmax over the verdicts of each one's best spelling (only those in the ``top`` logits)."""
    listed = set(np.argsort(-logits)[:top].tolist()) if top else set(range(len(logits)))
    best = {
        v: max(logits[i] for i in ids if i in listed)
        for v, ids in _label_ids(loaded.tokenizer).items()
        if any(i in listed for i in ids)
    }
    return _softmax(best)


def _assert_probabilities(details: dict[str, Any], score: float, want: dict[str, float]) -> None:
    got = details["probabilities"]
    # By verdict, not in order: PostgreSQL's JSONB keeps an object's keys in its own order.
    assert set(got) == set(want)
    np.testing.assert_allclose([got[v] for v in want], list(want.values()), atol=1e-5)
    assert score == pytest.approx(1.0 - want.get("correct", 0.0), abs=1e-5)


def _greedy(loaded: LoadedModel, ids: list[int]) -> list[int]:
    import torch

    tok = loaded.tokenizer
    with torch.inference_mode():
        out = loaded.model.generate(
            torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=BUDGET, do_sample=False, temperature=None, top_p=None, top_k=None,
            pad_token_id=tok.eos_token_id,
        )  # fmt: skip
    return out[0, len(ids) :].tolist()


def test_bad_outputs_are_counted_and_never_scored(store: Store) -> None:
    # A random model's words: no output has a valid verdict line.
    _, job_id = _queue(store, model="tiny", mode="generate", limit=3, max_new_tokens=6)
    assert run_queue(store) == 1
    result = _result(store, job_id)
    assert (result["items"], result["asked"], result["scored"]) == (3, 3, 0)
    assert result["retention"] == 0.0 and sum(result["invalid"].values()) == 3
    assert len(result["invalid_examples"]) == 3
    assert _scores(store, "critic:tiny") == {}


def _copy_items(store: Store, tmp_path: Path) -> None:
    table = tmp_path / "copy.csv"
    with table.open("w", newline="") as fh:
        csv.writer(fh).writerows([("id", "question", "gold"), *COPY_ITEMS])
    with transaction(store.factory) as s:
        import_table(
            s, table, "answer", id_column="id", labels={"reference": "gold"}, grader="exact",
            benchmark="copy",
        )  # fmt: skip


def _expected_generation(
    store: Store, smollm2: LoadedModel, params: CriticParams
) -> dict[int, np.ndarray | None]:
    """Per copy item: the verdict step's logits of plain greedy generation, None if invalid.

    The generation is cut at the first verdict label after "VERDICT:" and its text checked by
    a regex here.
    """
    tok = smollm2.tokenizer
    labels = {i for ids in _label_ids(tok).values() for i in ids}
    with transaction(store.factory) as s:
        items = s.execute(
            select(Instance.id, Instance.payload).where(
                Instance.external_id.in_([c for c, _, _ in COPY_ITEMS])
            )
        ).all()
        keys = current_labels(s, [i for i, _ in items], ["reference"])
    out: dict[int, np.ndarray | None] = {}
    for iid, payload in items:
        prompt = _chat_ids(smollm2, params, payload, keys[iid]["reference"])
        generated = _greedy(smollm2, prompt)
        step = next(
            (
                k
                for k, t in enumerate(generated)
                if t in labels and tok.decode(generated[:k]).rstrip(" ").endswith("VERDICT:")
            ),
            None,
        )
        text = tok.decode(generated[: step + 1] if step is not None else generated)
        valid = step is not None and LINE.search(text.strip()) is not None
        out[iid] = _logits(smollm2, prompt + generated[:step]) if valid else None
    return out


# SmolLM2's forwards are the cost; the stored scores' round trip is the same code on both
# stores and runs on both in the tiny-model tests above.
@pytest.mark.one_dialect("postgresql")
def test_verdict_probabilities_locally_and_through_a_server(
    store: Store, smollm2: LoadedModel, tmp_path: Path
) -> None:
    _copy_items(store, tmp_path)
    # One worker (one model load) runs both local jobs: forced on two MMLU items in one padded
    # batch, and generation on the copy items.
    forced, forced_id = _queue(
        store, model="smollm2", mode="forced", limit=2, batch_size=2, detector="critic:forced"
    )
    local, local_id = _queue(store, max_new_tokens=BUDGET, template=COPY_TEMPLATE, **COPY)
    assert run_queue(store) == 2
    with serve_app(create_openai_app(smollm2, "smollm2")) as url:
        _, remote_id = _queue(
            store, detector="critic:served", backend="remote", base_url=f"{url}/v1",
            max_new_tokens=BUDGET, template=COPY_TEMPLATE, **COPY,
        )  # fmt: skip
        assert run_queue(store) == 1

    # Forced: every item scored; the softmax of a forward ending with the prefilled "VERDICT:".
    result = _result(store, forced_id)
    assert (result["items"], result["scored"], result["retention"]) == (2, 2, 1.0)
    assert result["with_probability"] == 2 and result["invalid"] == {}
    found = _scores(store, "critic:forced")
    assert set(found) == _sample(store, 2, seed=0)  # the seeded sample
    prefix = smollm2.tokenizer("VERDICT:", add_special_tokens=False)["input_ids"]
    for score, details, payload, key in found.values():
        logits = _logits(smollm2, _chat_ids(smollm2, forced, payload, key) + prefix)
        want = _reference(smollm2, logits)
        _assert_probabilities(details, score, want)
        assert details["verdict"] == max(want, key=want.__getitem__)
        assert (details["source"], details["mode"]) == ("logits", "forced")

    # Generated: exactly the valid outputs scored, at the verdict step, both backends.
    expected = _expected_generation(store, smollm2, local)
    valid = {i for i, logits in expected.items() if logits is not None}
    assert 0 < len(valid) < len(expected), "both outcomes are exercised"
    for name, job_id in (("critic:smollm2", local_id), ("critic:served", remote_id)):
        result = _result(store, job_id)
        found = _scores(store, name)
        assert set(found) == valid, name  # exactly the valid ones, none guessed
        assert (result["items"], result["asked"], result["scored"]) == (2, 2, len(valid))
        assert result["retention"] == len(valid) / 2
        assert sum(result["invalid"].values()) == 2 - len(valid)
        for iid, (score, details, _, _) in found.items():
            logits = expected[iid]
            assert logits is not None
            if name == "critic:smollm2":
                assert details["source"] == "logits" and "missing" not in details
                _assert_probabilities(details, score, _reference(smollm2, logits))
                continue
            # The server lists its top log-probabilities: the labels among them, the rest named.
            listed = _reference(smollm2, logits, top=TOP_LOGPROBS)
            assert details["source"] == "logprobs"
            assert details.get("missing", []) == [v for v in VERDICTS if v not in listed]
            _assert_probabilities(details, score, listed)
            exact = 1.0 - _reference(smollm2, logits)["correct"]
            assert abs(score - exact) <= details.get("max_error", 0.0) + 1e-6
