"""Probe recipes and the report card on the tiny model: every recipe fits, the card has every test.

The card job runs once per module (on one dialect's store) and its page is rendered from it;
each recipe's fit is checked directly, without the stress battery.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sqlalchemy import select
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.errors import InvalidInput
from app.ingest.lie.datasets import build_roleplay, build_truth
from app.ingest.lie.recipe_sets import TRAINING_SETS
from app.services.evidence.lie_recipes import RECIPES, get_recipe
from app.services.evidence.lie_variants import LIE_VARIANTS, lie_extract_spec
from app.services.evidence.probe_store import load_probe
from app.services.jobs.probe_card import ProbeCardParams, fitted_lie_probe, probe_reading
from app.settings import BUNDLED_DATA, Settings
from app.store import Store
from app.tables import Benchmark, Detector, Instance, Score
from tests.conftest import DATA
from tests.support.auth_support import api_client
from tests.support.job_support import register_tiny, run_job, store_on
from workers.engines.models import load_model
from workers.jobs.probe_card import card_probe, fit_recipe, lie_scores, recipe_inputs

SLICES = [
    "personas / on-policy", "personas / spp", "personas / assistant-prefill", "likelihood",
    "persona-belief", "compliance / square", "compliance / round",
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> Any:
    return load_model(tiny_model_dir, device="cpu", dtype="float32")


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_fits_and_scores_honest_items_higher_on_its_training_set(tiny, name):
    recipe = get_recipe(name)
    params = ProbeCardParams(model="tiny", recipe=name, size=3)
    probe, fit = fit_recipe(tiny, recipe, Path(BUNDLED_DATA), params, [1, 2])
    records = TRAINING_SETS[recipe.training](Path(BUNDLED_DATA), 3, 0)
    assert fit["n"] == len(records) and fit["layer"]["layer"] in (1, 2)
    x = recipe_inputs(tiny, recipe, [r.payload for r in records], [1, 2], 8)
    lie = np.asarray([r.labels["truth"] == "0" for r in records])
    # Fitted on these very items: the lie score separates them better than chance (a reference
    # AUROC from scikit-learn on the probe's own scores).
    assert roc_auc_score(lie, lie_scores(probe, x)) > 0.5


# The card's cost is the model's (building and capturing the stress sets); its one write, the
# job's result, is the same on both stores.
@pytest.mark.one_dialect("sqlite")
def test_card_job_has_every_stress_test_and_renders(
    settings: Settings, engine: Any, tiny_model_dir
):
    store: Store = store_on(settings, engine)
    register_tiny(store, tiny_model_dir)
    params = {"recipe": "paper", "model": "tiny", "size": 3, "personas": ["contrarian"],
              "resamples": 50}  # fmt: skip
    card = run_job(store, "probe_card", params)
    assert [r["slice"] for r in card["rows"]] == SLICES
    personas = card["sets"]["personas"]
    # Every candidate (question x persona) is either kept or rejected for one counted reason.
    assert personas["kept_pairs"] + sum(personas["rejections"].values()) == personas["considered"]
    likelihood = card["sets"]["likelihood"]
    assert likelihood["kept_pairs"] + sum(likelihood["rejections"].values()) == 3
    for cond in likelihood["verification"].values():
        assert cond["lie_win_rate"] == 1.0 and cond["lie_loglik"] > cond["honest_loglik"]
    compliance = card["sets"]["compliance"]["verification"]
    assert set(compliance) == {"square brackets", "round brackets"}
    assert card["control"]["n_control"] == 3 and card["control"]["flagged"] <= 1
    with api_client(settings) as client:
        text = client.get("/probes").text
    assert "Report cards" in text and "compliance / round" in text
    assert "rewarded-wrong-quiz" in text or likelihood["kept_pairs"] == 0


# One fit of a lie probe, then its card: the model's cost again, the same on both stores.
@pytest.mark.one_dialect("sqlite")
def test_a_fitted_lie_probe_gets_a_card_that_reads_items_as_it_was_fitted(
    cli_store: Settings, engine: Any, tiny_model_dir: Path, tiny: Any
) -> None:
    settings = cli_store
    store: Store = store_on(settings, engine)
    register_tiny(store, tiny_model_dir)
    with transaction(store.factory) as s:
        build_truth(s, DATA, formats=("affirmative", "negated"), topics=("element_symb",),
                    benchmark="truth-el")  # fmt: skip
        build_roleplay(s, DATA)
    spec = lie_extract_spec("lie", "tiny", layers=[1, 2, 3, 4])
    fitted = run_job(
        store, "fit_lie_probe", {"benchmark": "truth-el", "name": "mine", "extract": spec}
    )
    run_job(store, "apply_probe", {"probe": "mine", "benchmark": "roleplay"})
    with transaction(store.factory) as s:
        details, artifact = fitted_lie_probe(s, "mine"), load_probe(s, settings.data_dir, "mine")[1]
        applied = dict(
            s.execute(
                select(Instance.external_id, Score.score)
                .join(Score, Score.instance_id == Instance.id)
                .join(Detector, Detector.id == Score.detector_id)
                .where(Detector.name == "mine")
            ).all()
        )
        replies = s.execute(
            select(Instance.external_id, Instance.payload)
            .join(Benchmark, Benchmark.id == Instance.benchmark_id)
            .where(Benchmark.name == "roleplay")
            .order_by(Instance.id)
        ).all()
    recipe, probe, layers, fit = card_probe("mine", details, artifact, tiny.info.fingerprint)
    assert layers == [fitted["layer"]] and fit["layer"]["layer"] == fitted["layer"]
    # The card's capture of the roleplay replies gives the probe's own scores there (probe
    # apply captured them with the extraction engine): P(honest) = expit(-lie score).
    x = recipe_inputs(tiny, recipe, [dict(p) for _, p in replies], layers, 8)
    card_p = 1.0 / (1.0 + np.exp(lie_scores(probe, x)))
    want = np.asarray([applied[e] for e, _ in replies])
    assert want.size == 104
    np.testing.assert_allclose(card_p, want, atol=1e-5)
    # The card job itself: every stress test, the probe's own layer, no fitting.
    params = {"probe": "mine", "model": "tiny", "size": 3, "personas": ["contrarian"],
              "resamples": 50}  # fmt: skip
    card = run_job(store, "probe_card", params)
    assert card["probe"] == "mine" and card["fit"]["layer"] == {
        "rule": "fitted",
        "layer": fitted["layer"],
    }
    assert [r["slice"] for r in card["rows"]] == SLICES
    # A recipe's card with the same model, sizes and personas scores the very same items: the
    # stress sets are read back from the first card's build, not built again.
    recipe_card = run_job(store, "probe_card", {**params, "probe": "", "recipe": "marks-truth"})
    assert (card["sets_reused"], recipe_card["sets_reused"]) == (False, True)
    assert recipe_card["sets"] == card["sets"]
    assert len(list((settings.data_dir / "stress-sets").glob("*.json"))) == 1
    # Refused before anything is queued, naming the option: a recipe and a probe together, a
    # probe that does not exist, a flip probe's artifact-less detector.
    runner = CliRunner()
    for args, option in (
        (["--recipe", "paper", "--probe", "mine"], "--recipe"),
        (["--probe", "nope"], None),
    ):
        out = runner.invoke(cli, ["probe", "card", "--model", "tiny", *args])
        assert out.exit_code != 0, out.output
        assert (option or "no probe named 'nope'") in out.output


def test_a_card_reads_every_fit_lie_variant_and_refuses_other_readings() -> None:
    readings = {v: probe_reading(lie_extract_spec(v, "m")) for v in LIE_VARIANTS}
    assert readings == {
        "truth": ("text", "statement_end"),
        "lie": ("chat", "end_of_turn"),
        "forced-opposite": ("chat", "end_of_turn"),
    }
    other_field = {**lie_extract_spec("truth", "m"), "text_field": "question"}
    other_token = {**lie_extract_spec("lie", "m"), "position": "before_marker:Answer"}
    for extract, said in ((other_field, "text_field='question'"), (other_token, "before_marker")):
        with pytest.raises(InvalidInput, match=said) as refused:
            probe_reading(extract)
        assert refused.value.field == "probe"
