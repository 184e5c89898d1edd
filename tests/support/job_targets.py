"""What every job kind can be started on, and a good and a bad request per kind.

Shared by the job-kind tests (tests/jobs) and the API tests of ``POST /api/jobs/{kind}``
(tests/web/test_job_starts.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.table import import_table
from app.services.evidence.activation_sets import ensure_activation_set
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.language_models import register_language_model
from app.tables import Detector
from tests.support import factories as f

CHOICE = "choice-mini"
MODEL = "smol"
ACTIVATIONS = "choice:smol/choice:choice-mini"
LIE_SPEC = {"model": MODEL, "format": "text", "text_field": "statement", "position": "last"}
CHOICE_CSV = """id,question,choices,answer,m1,m2
q1,Two plus two?,"[""3"",""4""]",B,B,B
q2,Capital of France?,"[""Paris"",""Rome""]",A,A,B
q3,Largest planet?,"[""Jupiter"",""Mars""]",A,B,B
"""


def seed_job_targets(factory: sessionmaker[Session], tmp: Path) -> None:
    """Seed what every kind can start on.

    The three small benchmarks, a choice benchmark with two models' answers, a model, a frozen
    probe (``f.PROBE``) and an activation set of the choice benchmark.
    """
    f.seed_benchmarks(factory)
    table = tmp / "choice-mini.csv"
    table.write_text(CHOICE_CSV)
    with transaction(factory) as s:
        import_table(
            s, table, "choice", {"question": "question"}, id_column="id", benchmark=CHOICE,
            options="choices", labels={"reference": "answer"}, answers={"m1": "m1", "m2": "m2"},
        )  # fmt: skip
        register_language_model(
            s, MODEL, path="/models/smol", fingerprint="sha256:x", details={"judge_mode": "forced"}
        )
        probe = s.scalar(select(Detector).where(Detector.name == f.PROBE))
        assert probe is not None
        probe.details = {"artifact": "probes/truth-layer12.npz", "benchmark": f.STATEMENTS}
        ensure_activation_set(
            s, ACTIVATIONS, benchmark_id=get_benchmark(s, CHOICE).id, model_fingerprint="sha256:x",
            path="activations/choice", layers=[1, 2], position_rule="before answer letter",
            dtype="float32", d_model=8,
        )  # fmt: skip


# kind -> (parameters that queue a job, parameters with one bad value, the field it is in).
REQUESTS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "judge": (
        {"benchmark": f.PAIRWISE, "model": MODEL, "limit": 2},
        {"benchmark": f.PAIRWISE, "model": MODEL, "batch_size": 0},
        "batch_size",
    ),
    "extract": (
        {"benchmark": f.STATEMENTS, "model": MODEL, "format": "text", "position": "last"},
        {"benchmark": f.STATEMENTS, "model": MODEL, "position": "middle"},
        "position",
    ),
    "answer_choices": (
        {"benchmark": CHOICE, "model": MODEL, "limit": 2},
        {"benchmark": CHOICE, "model": MODEL, "template": "No placeholders."},
        "template",
    ),
    "critic": (
        {"benchmark": CHOICE, "model": MODEL, "limit": 2},
        {"benchmark": CHOICE, "model": MODEL, "mode": "calibrated"},
        "mode",
    ),
    "rank_errors": (
        {"benchmark": CHOICE, "rankers": ["consensus"]},
        {"benchmark": CHOICE, "rankers": ["psychic"]},
        "rankers",
    ),
    "fit_probe": (
        {"benchmark": f.PAIRWISE, "judge": f.JUDGE},
        {"benchmark": f.PAIRWISE, "judge": f.JUDGE, "outer": 1},
        "outer",
    ),
    "fit_lie_probe": (
        {"benchmark": f.STATEMENTS, "name": "lie-1", "extract": LIE_SPEC},
        {"benchmark": f.STATEMENTS, "name": "lie-1", "extract": LIE_SPEC, "val_fraction": 0.9},
        "val_fraction",
    ),
    "rejudge": (
        {
            "benchmark": f.PAIRWISE,
            "judge": f.JUDGE,
            "budget": 2,
            "ranker": "random",
            "model": MODEL,
        },
        {"benchmark": f.PAIRWISE, "judge": f.JUDGE, "budget": 0, "ranker": "random"},
        "budget",
    ),
    "apply_probe": (
        {"probe": f.PROBE, "benchmark": f.STATEMENTS},
        {"probe": f.JUDGE, "benchmark": f.STATEMENTS},
        "probe",
    ),
    "fit_set_probe": (
        {"benchmark": CHOICE, "activation_set": ACTIVATIONS, "label": "reference"},
        {"benchmark": CHOICE, "activation_set": ACTIVATIONS, "label": "reference", "inner": 0},
        "inner",
    ),
    "build_dataset": ({"builder": "roleplay"}, {"builder": "bogus"}, "builder"),
    "probe_card": (
        {"recipe": "paper", "model": MODEL},
        {"recipe": "paper", "model": MODEL, "size": 0},
        "size",
    ),
    "warm_up": ({"benchmark": f.PAIRWISE}, {"benchmark": f.PAIRWISE, "resamples": 0}, "resamples"),
}
