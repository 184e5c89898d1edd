"""`appellate demo --no-serve` imports the bundled real data, and a second run adds nothing."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.cli.demo import BUNDLED_DATA
from app.db import transaction
from app.services.metrics.rankers import RANKERS
from app.settings import Settings
from app.tables import Base, Benchmark, Detector, Instance, LanguageModel, Score


def _counts(factory: sessionmaker[Session]) -> dict[str, int]:
    with transaction(factory) as session:
        return {
            t.name: session.scalar(select(func.count()).select_from(t)) or 0
            for t in Base.metadata.sorted_tables
        }


@pytest.mark.slow
def test_demo_imports_bundled_data_idempotently(
    settings: Settings,
    factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
    smollm2_dir: Path,
) -> None:
    # The session's converted SmolLM2 stands in for the demo's own conversion (same files).
    (settings.data_dir / "models").mkdir(parents=True)
    (settings.data_dir / "models" / smollm2_dir.name).symlink_to(smollm2_dir)
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    runner = CliRunner()
    first = runner.invoke(cli, ["demo", "--no-serve"])
    assert first.exit_code == 0, first.output
    assert "judgebench" in first.output
    with transaction(factory) as session:
        per_bench = dict(
            session.execute(
                select(Benchmark.name, func.count(Instance.id))
                .join(Instance, Instance.benchmark_id == Benchmark.id)
                .group_by(Benchmark.name)
            ).all()
        )
    assert per_bench["judgebench"] == 620
    assert per_bench["real-world-scenarios"] == 104
    # Every data row of the statement files becomes one instance of the `truth` benchmark.
    rows = 0
    for path in sorted((BUNDLED_DATA / "truth").glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as fh:
            rows += sum(1 for _ in csv.DictReader(fh))
    assert per_bench["truth"] == rows
    assert per_bench["mmlu-redux"] == 2900
    before = _counts(factory)
    assert before["judgments"] == 4 * 2 * 350
    with transaction(factory) as session:
        scores = dict(
            session.execute(
                select(Detector.kind, func.count(Score.id))
                .join(Score, Score.detector_id == Detector.id)
                .group_by(Detector.kind)
            ).all()
        )
        default = session.scalar(select(Benchmark).where(Benchmark.name == "mmlu-redux"))
    # Three reward models and o1-mini's two-order score on JudgeBench; every label-error ranker
    # that needs no local model on MMLU-Redux; the default is the fixed rule's (no label read).
    rankers = [r for r in RANKERS.values() if not r.needs_local]
    assert scores == {"reward_model": 3 * 350, "judge": 350, "ranker": len(rankers) * 2900}
    assert default is not None and default.details["rankers"]["default"] == "consensus"
    assert before["predictions"] == 2900 * 14 - 29  # 29 answers are empty in the CSVs
    with transaction(factory) as session:
        (model,) = session.scalars(select(LanguageModel))
    assert (model.name, model.n_layers) == ("smollm2", 30)
    assert (settings.data_dir / model.path).resolve() == smollm2_dir.resolve()
    assert model.details["judge_mode"] == "calibrated"

    assert "sign in as admin (one-time link, 24 h): http://" in first.output
    assert before["users"] == 1 and before["auth_tokens"] == 1

    second = runner.invoke(cli, ["demo", "--no-serve"])
    assert second.exit_code == 0, second.output
    # A second run imports nothing twice; it only prints a fresh sign-in link for the admin.
    after = _counts(factory)
    assert after.pop("auth_tokens") == 2
    before.pop("auth_tokens")
    assert after == before
