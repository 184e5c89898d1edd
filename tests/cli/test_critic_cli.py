"""``appellate critic`` as a user runs it: a tiny model checks two MMLU items, and its scores.

Its scores are then measured against the experts and rank the label-errors list; a critic on a
server is only queued.

The tiny random model says nothing sensible: the point is the path. Its forced verdicts score
every asked item, ``metrics --label defect`` measures ``critic:tiny`` and ``disagreements
--mode label-errors`` ranks by it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.evidence.language_models import register_language_model
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.tables import Detector, Score
from tests.conftest import DATA
from workers.engines.models import describe_model

SUBJECT = DATA / "mmlu-redux" / "college_chemistry.csv"


def test_critic_runs_from_the_command_line_and_its_scores_rank_the_items(
    cli_store: Settings, factory: sessionmaker[Session], tiny_model_dir: Path
) -> None:
    with transaction(factory) as s:
        import_mmlu_redux(s, [SUBJECT], "mmlu")
        register_language_model(
            s, "tiny", path=str(tiny_model_dir), dtype="float32",
            fingerprint=describe_model(tiny_model_dir).fingerprint,
        )  # fmt: skip
    runner = CliRunner()
    bad = runner.invoke(cli, ["critic", "mmlu", "--model", "tiny", "--mode", "calibrated"])
    assert bad.exit_code == 2 and "Invalid value for --mode" in bad.output, bad.output
    args = ["critic", "mmlu", "--model", "tiny", "--mode", "forced", "--limit", "2", "--wait"]
    done = runner.invoke(cli, [*args, "--device", "cpu"])
    assert done.exit_code == 0, done.output
    # With --wait stdout is the finished job alone, whole JSON; the job number is on stderr.
    job = json.loads(done.stdout)
    assert re.fullmatch(r"job \d+ queued", done.stderr.splitlines()[0]), done.stderr
    assert (job["kind"], job["status"]) == ("critic", "done")
    assert (job["result"]["items"], job["result"]["scored"], job["result"]["retention"]) == (
        2,
        2,
        1.0,
    )
    with transaction(factory) as s:
        scores = dict(
            s.execute(
                select(Score.instance_id, Score.score)
                .join(Detector, Detector.id == Score.detector_id)
                .where(Detector.name == "critic:tiny", Detector.kind == "critic")
            ).all()
        )
    assert len(scores) == 2 and all(0.0 <= v <= 1.0 for v in scores.values())

    measured = runner.invoke(
        cli, ["metrics", "mmlu", "--label", "defect", "-d", "critic:tiny", "--resamples", "50",
              "--json"],
    )  # fmt: skip
    assert measured.exit_code == 0, measured.output
    (row,) = [r for r in json.loads(measured.stdout)["rows"] if r["slice"] is None]
    assert row["detector"] == "critic:tiny" and row["n"] == 2

    listed = runner.invoke(
        cli, ["disagreements", "mmlu", "-d", "critic:tiny", "--mode", "label-errors", "--json"]
    )
    assert listed.exit_code == 0, listed.output
    items = json.loads(listed.stdout)
    rows = items["items"] if isinstance(items, dict) else items
    assert [r["score"] for r in rows] == sorted(scores.values(), reverse=True)

    # A server critic is queued with its URL (not run here: no server).
    queued = runner.invoke(
        cli, ["critic", "mmlu", "--model", "gpt-x", "--server", "http://127.0.0.1:9/v1"]
    )
    assert queued.exit_code == 0, queued.output
    with transaction(factory) as s:
        remote = job_queue.list_jobs(s, status="queued")[0]
    assert remote.params["backend"] == "remote" and remote.params["mode"] == "generate"
    assert remote.params["base_url"] == "http://127.0.0.1:9/v1"
    assert remote.params["detector"] == "critic:gpt-x"
