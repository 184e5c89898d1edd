"""A local model answering choice items as a user runs it: the real SmolLM2 on 40 MMLU items.

``appellate answer`` queues the job; a worker killed mid-job and a second worker finish it with
one prediction per item (option probabilities summing to 1) and one activation row per item;
the cleanlab ranker then runs on those probabilities. Slow: SmolLM2 forwards on the CPU.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select

from app.db import session_factory, transaction
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.evidence.activation_sets import get_activation_set
from app.services.jobs import queue as job_queue
from app.services.metrics.rankers import compute_rankers, rank_inputs
from app.settings import Settings
from app.tables import Detector, Prediction
from tests.cli.test_judge_cli import _appellate, _env
from tests.conftest import DATA, REPO
from workers.engines.activations import read_activation_set

pytestmark = pytest.mark.slow
SUBJECT = DATA / "mmlu-redux" / "astronomy.csv"
SET = "choice:smollm2/choice:mmlu"


# Enough batches of 4 to kill the worker after 8 and resume; the model's forwards are the cost.
ITEMS = 20
KILL_AFTER = 8


@pytest.fixture
def data_dir(tmp_path: Path, smollm2_dir: Path) -> Path:
    """A data directory whose models/ links to the session's converted SmolLM2."""
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / smollm2_dir.name).symlink_to(smollm2_dir, target_is_directory=True)
    return data


@pytest.mark.one_dialect("sqlite")
def test_answer_job_killed_and_resumed_stores_each_item_once(
    settings: Settings, engine: Any, data_dir: Path
) -> None:
    factory = session_factory(engine)
    with transaction(factory) as s:
        import_mmlu_redux(s, [SUBJECT], "mmlu")
    env = _env(settings, data_dir)
    _appellate(env, "models", "add-smollm2")
    _appellate(
        env, "answer", "mmlu", "--model", "smollm2", "--limit", str(ITEMS), "--batch-size", "4"
    )
    with transaction(factory) as s:
        (job,) = job_queue.list_jobs(s)
    worker = ["worker", "--device", "cpu", "--lease-seconds", "3", "--poll-seconds", "0.2"]
    first = subprocess.Popen([sys.executable, "-m", "app.cli", *worker], env=env, cwd=REPO)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        with transaction(factory) as s:
            if job_queue.get_job(s, job.id).progress_done >= KILL_AFTER:
                break
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    with transaction(factory) as s:
        killed = job_queue.get_job(s, job.id)
        written = s.scalar(
            select(func.count())
            .select_from(Prediction)
            .join(Detector, Detector.id == Prediction.detector_id)
            .where(Detector.name == "smollm2/choice")
        )
    assert killed.status == "running" and KILL_AFTER <= killed.progress_done < ITEMS
    assert written == killed.progress_done  # predictions and progress share each batch's commit

    second = subprocess.Popen([sys.executable, "-m", "app.cli", *worker], env=env, cwd=REPO)
    try:
        while time.monotonic() < deadline:
            with transaction(factory) as s:
                if job_queue.get_job(s, job.id).status in job_queue.FINISHED:
                    break
            time.sleep(0.2)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
    with transaction(factory) as s:
        finished = job_queue.get_job(s, job.id)
        rows = s.execute(
            select(Prediction.instance_id, Prediction.answer, Prediction.probabilities)
            .join(Detector, Detector.id == Prediction.detector_id)
            .where(Detector.name == "smollm2/choice")
        ).all()
        aset = get_activation_set(s, SET)
    assert (finished.status, finished.attempts, finished.lease_losses) == ("done", 1, 1), (
        finished.error
    )
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)) == ITEMS
    for _, answer, probs in rows:
        assert set(probs) == {"A", "B", "C", "D"} and abs(sum(probs.values()) - 1) < 1e-9
        assert answer == max(probs, key=probs.get)
    stored = read_activation_set(data_dir, aset)
    assert len(stored.instance_ids) == len(set(stored.instance_ids)) == ITEMS
    assert stored.values.shape == (ITEMS, 4, 576)
    # The cleanlab ranker runs on the local model's option probabilities.
    with transaction(factory) as s:
        inputs = rank_inputs(s, "mmlu")
    result = compute_rankers(inputs, ["cleanlab-local"])
    scores = result.scores["cleanlab-local"]
    assert int((~np.isnan(scores)).sum()) == ITEMS and float(np.nanmax(scores)) <= 1.0
