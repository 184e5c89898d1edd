"""Selective re-judging through the worker: the frozen probe ranks, exactly its top k are redone.

A tiny random Llama with SmolLM2's tokenizer judges the shortest real JudgeBench pairs in the AB
order; a frozen flip probe (an artifact on the judge's capture layer) ranks them. What the
judge says does not matter here: which pairs are judged in which order does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from app.db import transaction
from app.errors import InvalidInput
from app.ingest.judgebench import import_judgebench
from app.services.evidence.activation_sets import get_activation_set
from app.services.evidence.probe_store import save_probe
from app.services.jobs import queue as job_queue
from app.services.jobs.judge import JudgeParams
from app.services.jobs.judge_sampling import seeded_rank
from app.services.jobs.kind import create, enqueue
from app.services.jobs.rejudge import RejudgeParams
from app.services.jobs.rejudge_plan import REJUDGE_KEY
from app.settings import Settings
from app.stats.probes import LinearProbe
from app.store import Store
from app.tables import Instance, Judgment
from tests.support.job_support import register_tiny, run_job, run_queue, store_on
from tests.support.short_pairs import shortest_pairs
from workers.engines.activations import read_activation_set

JUDGE = "tiny/forced"
PROBE = f"probe:{JUDGE}@src"


@pytest.fixture
def store(settings: Settings, engine: Any, tiny_model_dir: Path, tmp_path: Path) -> Store:
    store = store_on(settings, engine)
    register_tiny(store, tiny_model_dir)
    with transaction(store.factory) as s:
        import_judgebench(s, [shortest_pairs(tmp_path / "pairs", 6)], benchmark="jb")
    return store


def _frozen_probe(store: Store, layer: int, width: int, fingerprint: str) -> LinearProbe:
    """A frozen flip probe of the judge on ``layer`` (fixed seeded weights)."""
    rng = np.random.default_rng(7)
    probe = LinearProbe(
        0, 1.0, 1.0, rng.normal(size=width), np.ones(width), rng.normal(size=width), 0.1
    )
    artifact = {
        "format": "appellate-probe-1",
        "source_benchmark": "src",
        "label": f"flip:{JUDGE}",
        "activation_set": f"judge:{JUDGE}:src",
        "model_fingerprint": fingerprint,
        "layer": layer,
        "lambda": 1.0,
        "C": 1.0,
        "probe": probe.to_dict(),
        "kind": "flip",
        "judge": JUDGE,
    }
    with transaction(store.factory) as s:
        save_probe(
            s,
            store.settings.data_dir,
            PROBE,
            artifact,
            {"kind": "flip-frozen", "judge": JUDGE, "source_benchmark": "src", "layer": layer},
        )
    return probe


def _orders(store: Store) -> dict[str, set[str]]:
    with transaction(store.factory) as s:
        rows = s.execute(
            select(Instance.external_id, Judgment.order)
            .join(Instance, Instance.id == Judgment.instance_id)
            .where(
                Instance.benchmark_id == select(Instance.benchmark_id).limit(1).scalar_subquery()
            )
        )
        out: dict[str, set[str]] = {}
        for external_id, order in rows:
            out.setdefault(external_id, set()).add(order)
        return out


def test_rejudge_judges_exactly_the_probes_top_k_in_the_other_order(store: Store) -> None:
    run_job(store, "judge", JudgeParams("jb", "tiny", mode="forced", orders=["AB"]).as_dict())
    with transaction(store.factory) as s:
        aset = get_activation_set(s, f"judge:{JUDGE}:jb")
        arr = read_activation_set(store.settings.data_dir, aset)
        external = dict(s.execute(select(Instance.id, Instance.external_id)).all())
    layer = arr.layers[-1]
    probe = _frozen_probe(store, layer, arr.values.shape[-1], aset.model_fingerprint)
    # The reference ranking, from the stored activations: probe scores, best first.
    x = arr.values[:, arr.layers.index(layer), :].astype(np.float64)
    scores = probe.predict_proba(x)
    ranked = sorted(
        zip(arr.instance_ids, scores, strict=True),
        key=lambda r: (-r[1], seeded_rank(0, external[int(r[0])])),
    )
    want = [external[int(i)] for i, _ in ranked[:2]]

    result = run_job(store, "rejudge", RejudgeParams("jb", JUDGE, budget=2).as_dict())
    assert result["ranker"] == PROBE and result["chosen"] == want
    assert result["remaining"] == 6 and result["unscored"] == 0
    orders = _orders(store)
    assert {e for e, o in orders.items() if "BA" in o} == set(want)
    assert all(o == {"AB"} for e, o in orders.items() if e not in want)
    with transaction(store.factory) as s:
        ba = s.execute(select(Judgment).where(Judgment.order == "BA")).scalars().all()
        assert {j.details[REJUDGE_KEY] for j in ba} == {1 + 1}  # the rejudge job's id
        ab = {
            j.instance_id: j.choice
            for j in s.scalars(select(Judgment).where(Judgment.order == "AB"))
        }
        flips = sum(ab[j.instance_id] != j.choice for j in ba)
    assert result["flips_found"] == flips and result["retained_pairs"] == 2

    # A second job redoes the next two: the first two are judged in both orders now.
    again = run_job(store, "rejudge", RejudgeParams("jb", JUDGE, budget=2).as_dict())
    assert again["remaining"] == 4
    assert again["chosen"] == [external[int(i)] for i, _ in ranked[2:4]]
    assert sum("BA" in o for o in _orders(store).values()) == 4


def test_rejudge_refuses_without_a_ranker_and_runs_a_random_order(store: Store) -> None:
    run_job(store, "judge", JudgeParams("jb", "tiny", mode="forced", orders=["AB"]).as_dict())
    with transaction(store.factory) as s:
        with pytest.raises(InvalidInput, match="no frozen flip probe"):
            enqueue(s, RejudgeParams("jb", JUDGE, budget=1))
        with pytest.raises(InvalidInput, match="at least 1"):
            create(s, RejudgeParams, {"benchmark": "jb", "judge": JUDGE, "budget": 0})
        external = list(s.scalars(select(Instance.external_id)))
        job = enqueue(s, RejudgeParams("jb", JUDGE, budget=3, ranker="random", seed=4))
    want = sorted(external, key=lambda e: seeded_rank(4, e))[:3]
    run_queue(store)
    with transaction(store.factory) as s:
        done = job_queue.get_job(s, job.id)
    assert done.status == "done", done.error
    assert done.result is not None and done.result["chosen"] == want
    assert {e for e, o in _orders(store).items() if "BA" in o} == set(want)
