"""Probe jobs on both dialects: the flip probe with baselines, freezing, transfer and comparisons.

The store holds a judge's real-shaped evidence (AB/BA judgments with logits and confidences,
derived flip labels, an activation set written through the shard files) where one layer carries
a planted flip direction, so the probe must beat the baselines on the same folds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select

from app.db import transaction
from app.services.evidence.benchmarks import ensure_benchmark
from app.services.evidence.detectors import ensure_detector
from app.services.evidence.flips import recompute_flips
from app.services.jobs import queue as job_queue
from app.services.jobs.fit_probe import FitFlipParams
from app.services.metrics.comparisons import comparisons_report
from app.settings import Settings
from app.store import Store
from app.tables import Detector, Instance, Judgment, Score
from tests.support.auth_support import api_client
from tests.support.job_support import run_job, run_queue, store_on
from tests.support.registry_support import INTERVAL_METRICS, RANKER_ONLY
from workers.engines.activations import open_activation_set, shard_files, sync_instance_order

JUDGE = "tiny/forced"
LAYERS = [1, 2, 3]
D = 16
FP = "sha256:" + "d" * 64


def _seed_flip_benchmark(store: Store, name: str, n: int, seed: int) -> None:
    """``n`` pairs in groups of two; layer 2 of the AB state points along the flip label."""
    rng = np.random.default_rng(seed)
    direction = np.ones(D) / np.sqrt(D)
    with transaction(store.factory) as s:
        bench = ensure_benchmark(s, name, "pairwise")
        judge = ensure_detector(s, JUDGE, "judge")
        flips = rng.random(n) < 0.4
        ids = []
        for i in range(n):
            inst = Instance(
                benchmark_id=bench.id,
                external_id=f"{name}-{i}",
                group_key=f"q{i // 2}",
                payload={"prompt": "Q", "response_a": "a" * (5 + i % 7), "response_b": "bb"},
            )
            s.add(inst)
            s.flush()
            ids.append(inst.id)
            ab = "A" if rng.random() < 0.6 else "B"
            ba = ab if not flips[i] else ("B" if ab == "A" else "A")
            for order, choice in (("AB", ab), ("BA", ba)):
                logits = rng.normal(size=2)
                s.add(
                    Judgment(
                        instance_id=inst.id, detector_id=judge.id, order=order, choice=choice,
                        confidence=float(rng.integers(50, 100)), mode="forced",
                        verdict_logits={"A": float(logits[0]), "B": float(logits[1])},
                    )
                )  # fmt: skip
        s.flush()
        recompute_flips(s, bench.id, [judge.id])
        aset = open_activation_set(
            s, f"judge:{JUDGE}:{name}", benchmark_id=bench.id, model_fingerprint=FP,
            layers=LAYERS, position_rule="before-verdict", d_model=D,
        )  # fmt: skip
        x = rng.normal(size=(n, len(LAYERS), D))
        x[:, 1, :] += np.outer(np.where(flips, 1.5, -1.5), direction)
        shard_files(store.settings.data_dir, aset).append(ids, x.astype(np.float32))
        sync_instance_order(s, store.settings.data_dir, aset)


@pytest.fixture
def store(settings: Settings, engine: Any) -> Store:
    return store_on(settings, engine)


_run = run_job


def test_flip_probe_beats_its_baselines_and_transfers_frozen(store: Store, settings: Settings):
    _seed_flip_benchmark(store, "src", 160, seed=1)
    _seed_flip_benchmark(store, "dst", 60, seed=2)
    result = _run(store, "fit_probe", {"benchmark": "src", "judge": JUDGE})
    assert result["probe"] == f"probe:{JUDGE}" and result["frozen"] == f"probe:{JUDGE}@src"
    aurocs = result["oof_auroc"]
    assert aurocs["probe"] > 0.9 and aurocs[f"baseline:{JUDGE}"] < 0.75
    with transaction(store.factory) as s:
        probe = s.scalar(select(Detector).where(Detector.name == f"probe:{JUDGE}"))
        assert probe is not None
        n_scores = s.scalar(select(func.count()).where(Score.detector_id == probe.id))
        folds = probe.details["folds"]
        baselines = s.scalars(select(Detector.name).where(Detector.kind == "baseline")).all()
    assert n_scores == result["n"] == 160  # one out-of-fold prediction per retained pair
    assert len(folds) == 5 and all(f["layer"] == 2 for f in folds)
    assert len(baselines) == 7  # the combined baseline and each single feature

    # Sessions closed here: one left open on PostgreSQL holds its transaction's locks, and the
    # teardown's TRUNCATE waits for them for ever.
    with store.factory() as s:
        report = comparisons_report(s, "src", f"flip:{JUDGE}", resamples=200)
    pair = next(p for p in report["pairs"] if p["second"] == f"baseline:{JUDGE}")
    metrics = {m["metric"]: m for m in pair["metrics"]}
    # Probabilities on a flip label set: every interval metric of the registry applies but
    # the top-k metrics of label-error rankers.
    before_registry = {"auroc", "auprc", "brier", "choice_matched_auroc"}
    assert set(metrics) == before_registry | set(INTERVAL_METRICS) - set(RANKER_ONLY)
    assert metrics["auroc"]["difference"] > 0.1 and metrics["auroc"]["difference_ci"][0] > 0

    applied = _run(store, "apply_probe", {"probe": f"probe:{JUDGE}@src", "benchmark": "dst"})
    assert applied["scored"] == 60
    with store.factory() as s:
        dst = comparisons_report(s, "dst", f"flip:{JUDGE}", resamples=200)
        prevalence = s.get_one(Detector, probe.id).details["prevalence"]
    (constant,) = dst["constant_predictors"]
    assert constant["probe"] == f"probe:{JUDGE}@src" and constant["n"] == 60
    assert constant["source_prevalence"] == pytest.approx(prevalence)
    with api_client(settings) as client:
        page = client.get("/benchmarks/src/metrics", params={"label": f"flip:{JUDGE}"})
        assert page.status_code == 200
        assert "Paired differences" in page.text and f"baseline:{JUDGE}" in page.text
        page = client.get("/benchmarks/dst/metrics", params={"label": f"flip:{JUDGE}"})
        assert "constant predictor" in page.text


def test_apply_refuses_activations_from_other_weights(store: Store):
    _seed_flip_benchmark(store, "src", 80, seed=3)
    _run(store, "fit_probe", {"benchmark": "src", "judge": JUDGE})
    with transaction(store.factory) as s:
        bench = ensure_benchmark(s, "other", "pairwise")
        open_activation_set(
            s, "elsewhere", benchmark_id=bench.id, model_fingerprint="sha256:" + "e" * 64,
            layers=LAYERS, position_rule="x", d_model=D,
        )  # fmt: skip
        job_id = job_queue.enqueue(
            s,
            "apply_probe",
            {"probe": f"probe:{JUDGE}@src", "benchmark": "other", "activation_set": "elsewhere"},
        ).id
    run_queue(store)
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
    assert job.status == "failed" and "other weights" in (job.error or "")


def test_probes_page_shows_fits_and_queues_jobs(store: Store, settings: Settings):
    _seed_flip_benchmark(store, "src", 80, seed=4)
    _run(store, "fit_probe", {"benchmark": "src", "judge": JUDGE})
    with api_client(settings) as client:
        page = client.get("/probes")
        assert page.status_code == 200
        text = page.text
        assert f"probe:{JUDGE}@src" in text and f"baseline:{JUDGE}:abs_margin" in text
        assert 'class="grid folds"' in text and "svg" in text and "inner-fold Brier" in text
        fit = client.post(
            "/probes/fit", data={"benchmark": "src", "judge": JUDGE}, follow_redirects=False
        )
        assert fit.status_code == 303
        job = client.get("/api" + fit.headers["location"]).json()
        # The form's two values, every other parameter the class's default.
        want = FitFlipParams(benchmark="src", judge=JUDGE)
        assert job["kind"] == "fit_probe" and FitFlipParams.from_dict(job["params"]) == want
        applied = client.post(
            "/probes/apply",
            data={"probe": f"probe:{JUDGE}@src", "benchmark": "src"},
            follow_redirects=False,
        )
        assert applied.status_code == 303
        bad = client.post(
            "/probes/fit-lie",
            data={"benchmark": "src", "model": "m", "name": "x", "variant": "nope"},
        )
        assert bad.status_code == 422 and "variant" in bad.text
