"""The report-card job end to end on the tiny model: every recipe fits, the card has every test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.services.evidence.lie_recipes import RECIPES
from app.settings import Settings
from app.store import Store
from tests.support.job_support import register_tiny, run_job, store_on


@pytest.fixture
def store(settings: Settings, engine: Any, tiny_model_dir: Path) -> Store:
    store = store_on(settings, engine)
    register_tiny(store, tiny_model_dir)
    return store


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_every_recipe_fits_and_gets_a_card(store: Store, recipe: str):
    card = run_job(
        store,
        "probe_card",
        {"recipe": recipe, "model": "tiny", "size": 4, "personas": ["contrarian"],
         "resamples": 50},
    )  # fmt: skip
    slices = [r["slice"] for r in card["rows"]]
    assert slices == [
        "personas / on-policy", "personas / spp", "personas / assistant-prefill", "likelihood",
        "persona-belief", "compliance / square", "compliance / round",
    ]  # fmt: skip
    print(recipe, card["fit"], card["sets"]["personas"], card["rows"])
