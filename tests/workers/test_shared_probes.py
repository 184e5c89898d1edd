"""Flip probes of two judges on their shared analysis set and shared folds; the estimability gate.

Each judge has real-shaped evidence (AB/BA judgments with logits, derived flips, an activation
set of AB pre-verdict states with a planted flip direction); the second judge has unparsed BA
verdicts on some pairs, so the analysis set is smaller than either judge's pairs.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.errors import InvalidInput
from app.services.evidence.benchmarks import ensure_benchmark
from app.services.evidence.detectors import ensure_detector
from app.services.evidence.flips import recompute_flips
from app.services.jobs.fit_probe import FitFlipParams
from app.services.jobs.kind import enqueue
from app.services.metrics.judge_analysis import analysis_set, shared_folds
from app.settings import Settings
from app.store import Store
from app.tables import Detector, Instance, Job, Judgment, Score
from tests.support.job_support import run_job, store_on
from workers.engines.activations import open_activation_set, shard_files, sync_instance_order

BENCH = "shared"
JUDGES = ("tiny/forced", "tiny/terse")
STEADY = "tiny/steady"
N = 60
LAYERS = [1, 2]
D = 8


def _seed(store: Store) -> None:
    rng = np.random.default_rng(5)
    with transaction(store.factory) as s:
        bench = ensure_benchmark(s, BENCH, "pairwise")
        ids = []
        for i in range(N):
            inst = Instance(
                benchmark_id=bench.id,
                external_id=f"p{i:02d}",
                group_key=f"q{i // 3}",
                payload={"prompt": "Q", "response_a": "a" * (3 + i % 5), "response_b": "bbb",
                         "source": f"s{i % 2}"},
            )  # fmt: skip
            s.add(inst)
            s.flush()
            ids.append(inst.id)
        for j, judge in enumerate(JUDGES):
            det = ensure_detector(s, judge, "judge")
            flips = rng.random(N) < 0.4
            for i, iid in enumerate(ids):
                ab = "A" if rng.random() < 0.6 else "B"
                ba = ab if not flips[i] else ("B" if ab == "A" else "A")
                if j == 1 and i % 10 == 3:
                    ba = "invalid"  # unparsed: not retained, so not in the shared set
                for order, choice in (("AB", ab), ("BA", ba)):
                    s.add(
                        Judgment(
                            instance_id=iid, detector_id=det.id, order=order, choice=choice,
                            verdict_logits={"A": float(rng.normal()), "B": float(rng.normal())},
                        )
                    )  # fmt: skip
            aset = open_activation_set(
                s, f"judge:{judge}:{BENCH}", benchmark_id=bench.id,
                model_fingerprint="sha256:" + "e" * 64, layers=LAYERS,
                position_rule="before-verdict", d_model=D,
            )  # fmt: skip
            x = rng.normal(size=(N, len(LAYERS), D))
            x[:, 1, 0] += np.where(flips, 2.0, -2.0)
            shard_files(store.settings.data_dir, aset).append(ids, x.astype(np.float32))
            sync_instance_order(s, store.settings.data_dir, aset)
        steady = ensure_detector(s, STEADY, "judge")
        for i, iid in enumerate(ids[:50]):
            # Always A, but for one pair in 50: a 2% flip rate.
            for order, choice in (("AB", "A"), ("BA", "B" if i == 4 else "A")):
                s.add(Judgment(instance_id=iid, detector_id=steady.id, order=order, choice=choice))
        s.flush()
        recompute_flips(s, bench.id)


@pytest.fixture
def store(settings: Settings, engine: Any) -> Store:
    store = store_on(settings, engine)
    _seed(store)
    return store


def _oof_folds(store: Store, name: str) -> dict[str, int]:
    with store.factory() as s:
        q = (
            select(Instance.external_id, Score.details)
            .join(Score, Score.instance_id == Instance.id)
            .join(Detector, Detector.id == Score.detector_id)
            .where(Detector.name == name)
        )
        return {ext: int(details["fold"]) for ext, details in s.execute(q)}


def test_both_judges_probes_and_baselines_use_one_analysis_set_and_one_set_of_folds(
    store: Store,
) -> None:
    common = {"benchmark": BENCH, "outer": 3, "inner": 2, "lambdas": [1.0], "seed": 2}
    common["slice_field"] = "source"
    first = run_job(store, "fit_probe", {**common, "judge": JUDGES[0], "shared": [JUDGES[1]]})
    second = run_job(store, "fit_probe", {**common, "judge": JUDGES[1], "shared": [JUDGES[0]]})
    with store.factory() as s:
        aset = analysis_set(s, BENCH, list(JUDGES), slice_field="source")
        folds = shared_folds(aset, 3, seed=2)
    expected = dict(zip(aset.external_ids, folds.fold.tolist(), strict=True))
    assert first["n"] == second["n"] == aset.n == N - N // 10  # the unparsed pairs left out
    for judge in JUDGES:
        assert _oof_folds(store, f"probe:{judge}") == expected
        assert _oof_folds(store, f"baseline:{judge}") == expected
    # Group integrity: the three pairs of a group share their fold.
    by_group: dict[str, set[int]] = {}
    for ext, k in expected.items():
        by_group.setdefault(f"q{int(ext[1:]) // 3}", set()).add(k)
    assert all(len(ks) == 1 for ks in by_group.values())
    with store.factory() as s:
        probe = s.scalar(select(Detector).where(Detector.name == f"probe:{JUDGES[1]}"))
        assert probe is not None
        assert probe.details["shared"] == {"judges": [JUDGES[1], JUDGES[0]], "n": aset.n, "seed": 2}
    # The planted direction is found on the shared folds.
    assert first["oof_auroc"]["probe"] > 0.8 and second["oof_auroc"]["probe"] > 0.8


def test_a_judge_with_a_2_percent_flip_rate_is_refused_with_the_reason(store: Store) -> None:
    params = FitFlipParams(benchmark=BENCH, judge=STEADY, shared=[JUDGES[0]])
    with transaction(store.factory) as s, pytest.raises(InvalidInput) as refused:
        enqueue(s, params)
    assert refused.value.field == "judge"
    assert (
        refused.value.reason == f"no probe of {STEADY}: flip rate 2.0% (1 of 50) is outside 5-95%"
    )


def test_the_cli_refuses_the_probe_naming_the_judge_option(
    store: Store, cli_store: Settings
) -> None:
    args = ["probe", "fit", BENCH, "--judge", STEADY, "--shared", JUDGES[0]]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    # The error box wraps its text: compare words.
    words = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert "Invalid value for --judge" in words
    assert "flip rate 2.0% (1 of 50) is outside 5-95%" in words
    with store.factory() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0  # nothing queued
