"""Lie-probe fidelity: duplicate statements never straddle a split; curves from held-out splits.

No normalised statement text is on both sides of any split of the bundled cities set; the
layer is picked on a validation split and the reported curve comes from a separate test split.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.statements import import_statements
from app.services.evidence.labelled_items import load_labelled
from app.services.evidence.probe_store import put_detector
from app.services.jobs import queue as job_queue
from app.settings import Settings
from app.stats.cv_splits import grouped_folds
from app.stats.probes import layer_auroc_curve, layer_auroc_curves
from app.stats.probes_groups import merge_groups_by_text, normalise_statement
from tests.conftest import DATA
from tests.support.auth_support import api_client
from tests.support.job_support import store_on
from workers.engines.capture import usable_cores
from workers.engines.probe_data import STATEMENT_FIELD, statement_groups
from workers.jobs.probes import selection_splits
from workers.runner import JobContext, Worker

CITIES = DATA / "truth" / "cities.csv"
SEEDS = range(5)


def test_normalise_statement() -> None:
    assert normalise_statement("  The city of Oslo\tis in  Norway. ") == (
        "the city of oslo is in norway"
    )
    assert normalise_statement("«Oslo»!?") == "«oslo»"  # only ASCII/typographic edge marks
    assert normalise_statement("'x' means 'y'.") == "x' means 'y"  # quotes are punctuation
    assert normalise_statement("...") == ""


def test_merging_is_transitive_and_keeps_unlinked_groups() -> None:
    groups = ["a", "b", "c", "d", "e"]
    texts = ["Same.", "same", "other", "OTHER!", None]
    # a~b by text, c~d by text; b and c are one stored group only if they say so.
    assert merge_groups_by_text(groups, texts).tolist() == ["a", "a", "c", "c", "e"]
    assert merge_groups_by_text(["x", "y", "x"], ["p", "q", "q"]).tolist() == ["x", "x", "x"]
    with pytest.raises(ValueError, match="2 groups but 1 texts"):
        merge_groups_by_text(["a", "b"], ["t"])


def _cities_without_groups(folder: Path) -> Path:
    """The bundled cities as a ``statement,label`` file whose statements repeat.

    The upstream true/false sets repeat statements (with other case, spacing or final
    punctuation); every second row comes back once more in such a form.
    """
    with CITIES.open(newline="") as f:
        rows = [(r["statement"], r["label"]) for r in csv.DictReader(f)]
    variants = [
        lambda s: s.upper(),
        lambda s: "  " + s.replace(" ", "  ") + " ",
        lambda s: s.rstrip(".") + "!",
    ]
    repeated = [(variants[k % 3](s), label) for k, (s, label) in enumerate(rows[::2])]
    path = folder / "cities_repeated.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["statement", "label"])
        writer.writerows(rows + repeated)
    return path


def _straddling(texts: np.ndarray, a: np.ndarray, b: np.ndarray) -> set[str]:
    return set(texts[a].tolist()) & set(texts[b].tolist())


def test_no_statement_text_on_both_sides_of_any_split(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    path = _cities_without_groups(tmp_path)
    with transaction(factory) as s:
        import_statements(s, path, benchmark="cities-repeated")
        # The bundled files as they are (grouped by their city column) share the check.
        import_statements(s, CITIES, benchmark="cities")
        import_statements(s, DATA / "truth" / "neg_cities.csv", benchmark="cities")
    for benchmark in ("cities-repeated", "cities"):
        with transaction(factory) as s:
            items = load_labelled(s, benchmark, "truth", slice_field=STATEMENT_FIELD)
        texts = np.asarray([normalise_statement(t) for t in items.slices or []])
        groups = statement_groups(items)
        for seed in SEEDS:
            split = selection_splits(groups, 0.2, 0.2, seed)
            parts = [split.train, split.validation, split.test]
            assert sum(p.size for p in parts) == texts.size
            for k, a in enumerate(parts):
                for b in parts[k + 1 :]:
                    assert not _straddling(texts, a, b)
            for train, test in grouped_folds(items.y, groups, 5, seed):
                assert not _straddling(texts, train, test)
        if benchmark == "cities-repeated":
            # The check has teeth: the stored groups of a file without a group column (one
            # per row) put copies of a statement on both sides.
            assert len(set(texts.tolist())) < texts.size
            stored = selection_splits(np.asarray(items.groups, dtype=object), 0.2, 0.2, 0)
            assert _straddling(texts, stored.train, stored.test)


def test_held_out_curves_share_one_fit_per_layer() -> None:
    rng = np.random.default_rng(0)
    n, layers, d = 240, 3, 4
    y = np.tile([0, 1], n // 2)
    x = rng.normal(size=(n, layers, d))
    x[:, 1, 0] += 2.0 * y  # only layer 1 carries the label
    train, val, test = np.arange(0, 120), np.arange(120, 180), np.arange(180, 240)
    validation, held_out = layer_auroc_curves(
        x[train], y[train], [(x[val], y[val]), (x[test], y[test])]
    )
    assert int(np.argmax(validation)) == 1 and int(np.argmax(held_out)) == 1
    assert held_out[1] > 0.8 and max(held_out[0], held_out[2]) < 0.75
    # The one-set form is the same numbers.
    assert np.allclose(layer_auroc_curve(x[train], y[train], x[val], y[val]), validation)


def test_probes_page_says_which_split_picked_the_layer_and_which_is_reported(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    details = {
        "kind": "lie",
        "source_benchmark": "truth",
        "label": "truth",
        "layers": [1, 2, 3],
        "validation_auroc": [0.6, 0.9, 0.8],
        "test_auroc": [0.55, 0.85, 0.7],
        "reported_curve": "test",
        "splits": {"train": 600, "validation": 200, "test": 200, "groups": 700},
        "layer": 2,
        "n": 1000,
    }
    with transaction(factory) as s:
        put_detector(s, "held-out", "probe", details)
        put_detector(s, "older", "probe", {k: v for k, v in details.items() if k != "test_auroc"})
    with api_client(settings) as client:
        text = client.get("/probes").text
    assert "picked on a validation split (200 items)" in text
    assert "separate test split (200 items) that played no part in the choice" in text
    assert "Test AUROC at layer 2: 0.850" in text
    assert "test AUROC (reported)" in text  # the plot's second series
    assert "picked and reported on the same validation split" in text  # the older probe


@pytest.mark.parametrize("threads", [1, None])
def test_the_worker_sets_torch_threads_from_its_settings(
    settings: Settings, engine: Any, threads: int | None
) -> None:
    import torch

    before = torch.get_num_threads()
    store = store_on(settings.model_copy(update={"worker_threads": threads}), engine)
    seen: list[int] = []

    def record(ctx: JobContext) -> dict[str, Any]:
        seen.append(torch.get_num_threads())
        return {}

    with transaction(store.factory) as s:
        job_queue.enqueue(s, "record", {})
    try:
        assert Worker(store, {"record": record}, log=lambda _: None).run(once=True) == 1
    finally:
        torch.set_num_threads(before)
    assert seen == [threads or usable_cores()]
