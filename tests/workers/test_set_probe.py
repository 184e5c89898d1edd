"""A probe of ``defect`` on the residual stream a local model left at a choice item's answer.

Six MMLU-Redux subjects (the first 12 questions of each, so every subject has expert-flagged
errors) are answered by the tiny model, whose activation set the generic probe job fits
against ``defect`` by nested CV grouped by subject.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from app.db import transaction
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.evidence.labels import current_labels
from app.services.jobs import queue as job_queue
from app.services.jobs.answer import ChoiceParams
from app.services.jobs.fit_set_probe import FitSetParams
from app.services.jobs.kind import enqueue
from app.settings import Settings
from app.store import Store
from app.tables import Detector, Instance, Score
from tests.conftest import DATA
from tests.support.job_support import register_tiny, run_job, run_queue, store_on

SUBJECTS = (
    "security_studies", "professional_law", "logical_fallacies", "high_school_biology",
    "abstract_algebra", "college_chemistry",
)  # fmt: skip
ROWS = 12


@pytest.fixture
def store(settings: Settings, engine: Any, tiny_model_dir: Path, tmp_path: Path) -> Store:
    store = store_on(settings, engine)
    register_tiny(store, tiny_model_dir)
    files = []
    for subject in SUBJECTS:
        lines = (DATA / "mmlu-redux" / f"{subject}.csv").read_text(encoding="utf-8").splitlines()
        # Whole records: the bundled files hold no newlines inside a cell.
        path = tmp_path / f"{subject}.csv"
        path.write_text("\n".join(lines[: ROWS + 1]) + "\n", encoding="utf-8")
        files.append(path)
    with transaction(store.factory) as s:
        import_mmlu_redux(s, files, "mmlu")
        enqueue(s, ChoiceParams(benchmark="mmlu", model="tiny", batch_size=16))
    assert run_queue(store) == 1
    return store


def test_out_of_fold_scores_of_defect_grouped_by_subject(store: Store) -> None:
    params = {"benchmark": "mmlu", "activation_set": "choice:tiny/choice:mmlu", "label": "defect"}
    result = run_job(store, FitSetParams.kind, {**params, "outer": 3, "inner": 2})
    n = len(SUBJECTS) * ROWS
    assert result["n"] == n and result["groups"] == len(SUBJECTS)
    with transaction(store.factory) as s:
        ids = list(s.scalars(select(Instance.id)))
        defect = {i: v.get("defect") for i, v in current_labels(s, ids, ["defect"]).items()}
        assert result["positives"] == sum(v == "1" for v in defect.values()) > 0
        probe = s.scalar(select(Detector).where(Detector.name == result["probe"]))
        assert probe is not None and probe.kind == "probe"
        rows = s.execute(
            select(Score.instance_id, Score.score, Score.details, Instance.group_key)
            .join(Instance, Instance.id == Score.instance_id)
            .where(Score.detector_id == probe.id)
        ).all()
    assert len(rows) == n
    assert all(0.0 <= score <= 1.0 for _, score, _, _ in rows)
    # Every subject is predicted from one outer fold: never on both sides of a split.
    fold_of_subject: dict[str, set[int]] = {}
    for _, _, details, group in rows:
        fold_of_subject.setdefault(group, set()).add(details["fold"])
    assert all(len(folds) == 1 for folds in fold_of_subject.values())
    assert len({f for folds in fold_of_subject.values() for f in folds}) == 3
    assert probe.details["oof_auroc"] == pytest.approx(result["oof_auroc"])
    assert np.isfinite(result["oof_auroc"])


def test_an_unknown_label_set_fails_the_job_with_its_name(store: Store) -> None:
    params = {"benchmark": "mmlu", "activation_set": "choice:tiny/choice:mmlu", "label": "nope"}
    with transaction(store.factory) as s:
        job_id = job_queue.enqueue(s, FitSetParams.kind, params).id
    run_queue(store)
    with transaction(store.factory) as s:
        job = job_queue.get_job(s, job_id)
        assert job.status == "failed"
        assert "nope" in (job.error or "")
        assert s.scalar(select(Detector).where(Detector.name.like("probe:%"))) is None
