"""Lie-detector probes end to end on a tiny model, on both dialects: build, capture, fit, apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from app.db import transaction
from app.ingest.lie.datasets import build_roleplay, build_truth
from app.services.evidence.lie_variants import lie_extract_spec
from app.services.evidence.probe_store import load_probe
from app.services.jobs import queue as job_queue
from app.services.metrics.report import metrics_report
from app.settings import Settings
from app.store import Store
from app.tables import Detector, Score
from tests.conftest import DATA
from tests.support.auth_support import api_client
from tests.support.job_support import register_tiny, run_job, run_queue, store_on


@pytest.fixture
def store(settings: Settings, engine: Any, tiny_model_dir: Path) -> Store:
    store = store_on(settings, engine)
    register_tiny(store, tiny_model_dir)
    with transaction(store.factory) as s:
        build_truth(s, DATA, formats=("affirmative", "negated"), topics=("element_symb",),
                    benchmark="truth-el")  # fmt: skip
        build_roleplay(s, DATA)
    return store


_run = run_job


@pytest.mark.parametrize("variant", ["lie", "truth"])
def test_fit_lie_probe_then_score_the_roleplay_replies(store: Store, variant: str):
    name = f"{variant}-probe"
    spec = lie_extract_spec(variant, "tiny", layers=[1, 2, 3, 4])
    fitted = _run(store, "fit_lie_probe", {"benchmark": "truth-el", "name": name, "extract": spec})
    assert fitted["layer"] in (1, 2, 3, 4) and len(fitted["validation_auroc"]) == 4
    curve = fitted["validation_auroc"]
    # The earliest layer reaching the best validation AUROC.
    assert fitted["layer"] == [1, 2, 3, 4][curve.index(max(curve))]
    with transaction(store.factory) as s:
        detector, artifact = load_probe(s, store.settings.data_dir, name)
        assert detector.details["n"] == 372 and artifact["extract"]["format"] == spec["format"]
    applied = _run(store, "apply_probe", {"probe": name, "benchmark": "roleplay"})
    assert applied["scored"] == 104
    # Named by the capture spec, so probes that read items the same way share one capture.
    assert applied["activation_set"].startswith("extract:tiny:roleplay:")
    with transaction(store.factory) as s:
        probe_id = s.scalar(select(Detector.id).where(Detector.name == name))
        scores = s.scalars(select(Score.score).where(Score.detector_id == probe_id)).all()
        report = metrics_report(s, "roleplay", "truth", [name], slice_field="dataset", resamples=50)
        n = s.scalar(select(func.count()).select_from(Score).where(Score.detector_id == probe_id))
    assert n == 104 and all(0.0 <= x <= 1.0 for x in scores)
    kinds = [r["slice"] for r in report["rows"]]
    assert kinds == [None, "all_unambiguous_replies", "(macro-average)"]
    assert report["rows"][0]["auroc"] is not None


def test_probes_page_draws_the_validation_curve(store: Store, settings: Settings):

    spec = lie_extract_spec("lie", "tiny", layers=[1, 2, 3])
    _run(store, "fit_lie_probe", {"benchmark": "truth-el", "name": "p", "extract": spec})
    with api_client(settings) as client:
        text = client.get("/probes").text
    assert "validation AUROC by layer: p" in text and "<polyline" in text
    assert 'class="reference"' in text  # the chosen layer is marked


def test_dataset_builds_run_as_jobs(store: Store, settings: Settings):

    with api_client(settings) as client:
        queued = client.post(
            "/probes/datasets", data={"builder": "personas"}, follow_redirects=False
        )
        assert queued.status_code == 303
        assert client.post("/probes/datasets", data={"builder": "x"}).status_code == 422
    run_queue(store)
    with transaction(store.factory) as s:
        (job,) = [j for j in job_queue.list_jobs(s) if j.kind == "build_dataset"]
        assert job.status == "done" and job.progress_done == job.progress_total == 1
        assert job.result is not None and "personas" in job.result["summaries"][0]
