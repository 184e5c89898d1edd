"""The judge as a user runs it on the real SmolLM2: the CLI with --wait, a worker killed mid-job.

Slow (SmolLM2 forwards over JudgeBench prompts on the CPU): about a minute each.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from app.db import session_factory, transaction
from app.ingest.judgebench import import_judgebench
from app.services.evidence.activation_sets import get_activation_set
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.tables import Instance, Judgment, LabelEvent
from tests.conftest import REPO
from tests.support.auth_support import api_client
from tests.support.short_pairs import shortest_pairs
from workers.engines.activations import read_activation_set

pytestmark = pytest.mark.slow
SET = "judge:smollm2/calibrated:judgebench"


def _env(settings: Settings, model_data: Path) -> dict[str, str]:
    return {
        **os.environ,
        "APPELLATE_DATABASE_URL": settings.resolved_database_url,
        "APPELLATE_DATA_DIR": str(model_data),
    }


def _appellate(env: dict[str, str], *args: str, timeout: float = 900) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def data_dir(tmp_path: Path, smollm2_dir: Path) -> Path:
    """A fresh data directory whose models/ links to the session's converted SmolLM2."""
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / smollm2_dir.name).symlink_to(smollm2_dir, target_is_directory=True)
    return data


@pytest.fixture
def user_env(settings: Settings, engine: Any, data_dir: Path) -> dict[str, str]:
    """A store with the JudgeBench pairs and SmolLM2 registered by ``models add-smollm2``."""
    with transaction(session_factory(engine)) as s:
        # The shortest real pairs: the job's every path, in a fraction of the model's time.
        pairs = shortest_pairs(data_dir.parent / "pairs", 6)
        import_judgebench(s, [pairs], benchmark="judgebench")
    env = _env(settings, data_dir)
    _appellate(env, "models", "add-smollm2")  # finds the converted model: registers only
    return env


@pytest.mark.one_dialect("sqlite")
def test_judge_wait_makes_every_judgment_with_activations_and_flips(
    user_env: dict[str, str], settings: Settings, engine: Any, data_dir: Path
):
    out = _appellate(
        user_env, "judge", "judgebench", "--model", "smollm2", "--limit", "4",
        "--repeat-subset", "2", "--wait",
    )  # fmt: skip
    job = json.loads(out[out.index("{") :])
    assert job["status"] == "done" and job["params"]["mode"] == "calibrated"
    result = job["result"]
    assert result["judgments"] == 10
    assert result["by_order"] == {"AB": 4, "BA": 4, "AB-repeat": 2}
    assert result["repeat_control"] == {"compared": 2, "changed": 0}
    assert result["retained_pairs"] == 4
    factory = session_factory(engine)
    with transaction(factory) as s:
        assert s.scalar(select(func.count()).select_from(Judgment)) == 10
        flips = s.scalar(
            select(func.count()).where(LabelEvent.label_name == "flip:smollm2/calibrated")
        )
        aset = get_activation_set(s, SET)
        first_ab = s.scalar(
            select(Instance.external_id)
            .join(Judgment, Judgment.instance_id == Instance.id)
            .where(Judgment.order == "AB")
            .order_by(Instance.id)
        )
    assert flips == 4
    arr = read_activation_set(data_dir, aset)
    assert arr.values.shape == (4, 4, 576) and arr.layers == [8, 15, 23, 29]

    with api_client(settings.model_copy(update={"data_dir": data_dir})) as client:
        page = client.get(f"/jobs/{job['id']}")
        inst = client.get(f"/benchmarks/judgebench/instances/{first_ab}")
    assert page.status_code == 200
    assert "10" in page.text and "done" in page.text and "smollm2/calibrated" in page.text
    assert inst.status_code == 200
    assert "smollm2/calibrated" in inst.text and SET in inst.text


@pytest.mark.one_dialect("postgresql")
def test_sigkill_mid_job_then_restart_finishes_every_unit_exactly_once(
    user_env: dict[str, str], engine: Any, data_dir: Path
):
    factory = session_factory(engine)
    _appellate(user_env, "judge", "judgebench", "--model", "smollm2", "--limit", "4",
               "--batch-size", "1")  # fmt: skip
    with transaction(factory) as s:
        (job,) = job_queue.list_jobs(s)
    worker = ["worker", "--device", "cpu", "--lease-seconds", "3", "--poll-seconds", "0.2"]
    first = subprocess.Popen([sys.executable, "-m", "app.cli", *worker], env=user_env, cwd=REPO)
    deadline = time.monotonic() + 600
    done = 0
    while time.monotonic() < deadline:
        with transaction(factory) as s:
            done = job_queue.get_job(s, job.id).progress_done
        if done >= 3:
            break
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    with transaction(factory) as s:
        killed = job_queue.get_job(s, job.id)
        written = s.scalar(select(func.count()).select_from(Judgment))
    assert killed.status == "running" and 3 <= killed.progress_done < 8, killed.progress_done
    assert written == killed.progress_done  # progress and results share each batch's commit

    second = subprocess.Popen([sys.executable, "-m", "app.cli", *worker], env=user_env, cwd=REPO)
    try:
        while time.monotonic() < deadline:
            with transaction(factory) as s:
                if job_queue.get_job(s, job.id).status in job_queue.FINISHED:
                    break
            time.sleep(0.2)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0  # a graceful stop
    with transaction(factory) as s:
        finished = job_queue.get_job(s, job.id)
        keys = list(s.execute(select(Judgment.instance_id, Judgment.order)))
        aset = get_activation_set(s, SET)
    # The killed worker's claim is a lost lease, not a failed attempt of the job's code.
    assert (finished.status, finished.attempts, finished.lease_losses) == ("done", 1, 1)
    assert len(keys) == len(set(keys)) == 8
    ids = read_activation_set(data_dir, aset).instance_ids
    assert len(ids) == len(set(ids)) == 4
