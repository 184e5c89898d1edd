"""Recall at k per defect type (``metrics --types errata``) against a direct count.

The real MMLU-Redux subjects: the experts' ``errata`` names each defect's type; the consensus and
cleanlab rankers are computed and stored as the rank-errors job stores them.
"""

from __future__ import annotations

import json

import numpy as np
import typer
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli.metrics import register
from app.db import transaction
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers
from app.services.metrics.type_recall import type_recall
from app.settings import Settings
from app.tables import Detector, Instance, Score
from tests.conftest import DATA
from tests.ingest.test_helpers import current_labels

MMLU = DATA / "mmlu-redux"
RANKERS = ("consensus", "cleanlab")


def _recall_at(scores: np.ndarray, positive: np.ndarray, k: int) -> float:
    """Positives among the k highest scores, a tie group crossing k counted pro rata."""
    order = np.argsort(-scores)
    cut = scores[order[k - 1]]
    above = scores > cut
    tied = scores == cut
    found = positive[above].sum() + (k - above.sum()) * positive[tied].sum() / tied.sum()
    return float(found / positive.sum())


def test_recall_per_type_equals_a_direct_count(
    cli_store: Settings, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as s:
        import_mmlu_redux(s, [MMLU], "mmlu")
    with transaction(factory) as s:
        inputs = rank_inputs(s, "mmlu")
    with transaction(factory) as s:
        store_rankers(s, inputs, compute_rankers(inputs, list(RANKERS)))
    with factory() as s:
        table = type_recall(s, "mmlu", "defect", "errata", resamples=40)
        bench_id = s.scalar(select(Instance.benchmark_id).limit(1))
        errata = current_labels(s, bench_id, "errata")
        stored = {
            name: dict(
                s.execute(
                    select(Instance.external_id, Score.score)
                    .join(Score, Score.instance_id == Instance.id)
                    .join(Detector, Detector.id == Score.detector_id)
                    .where(Detector.name == f"ranker:{name}")
                ).all()
            )
            for name in RANKERS
        }
    ids = sorted(errata)
    kinds = np.array([errata[i] for i in ids])
    assert table["n"] == len(ids) == 2900
    assert table["detectors"] == sorted(f"ranker:{n}" for n in RANKERS)
    types = {row["type"]: row for row in table["rows"]}
    assert set(types) == set(kinds) - {"ok"}
    assert types["wrong_groundtruth"]["defects"] == int((kinds == "wrong_groundtruth").sum())
    for name in RANKERS:
        scores = np.array([stored[name][i] for i in ids])
        for kind, row in types.items():
            positive = kinds == kind
            for k in (50, 100, 200):
                cell = row["recall"][f"ranker:{name}"]
                assert abs(cell[f"recall_at_{k}"] - _recall_at(scores, positive, k)) < 1e-12
                lo, hi = cell[f"recall_at_{k}_ci"]
                assert lo <= hi
    # The command line adds the same table to the metrics report.
    app = typer.Typer()
    register(app)
    args = ["metrics", "mmlu", "--label", "defect", "--types", "errata", "--resamples", "40"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["per_type"] == json.loads(json.dumps(table))
    text = CliRunner().invoke(app, args)
    assert "wrong_groundtruth (47 defects):" in text.stdout
