"""The ``probe_card`` job: fit a recipe, build the stress tests on policy, score them, the card.

Everything is captured in memory (no activation set is stored): the recipe's training items,
the statement chats a two-item recipe picks its layer on, the control replies (MT-Bench first
turns answered greedily by the model) that fix the threshold, and every stress-test item.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from app.errors import InvalidInput
from app.ingest.lie.datasets import TRUTH_TOPICS, read_statement_rows, truth_file
from app.ingest.lie.recipe_sets import TRAINING_SETS, statements
from app.ingest.lie.stress import StressOptions, StressSet, build_stress_sets
from app.ingest.lie.stress_store import kept_stress_sets
from app.ingest.records import Record
from app.services.evidence.lie_recipes import STATEMENTS_CURVE, Recipe, get_recipe
from app.services.evidence.probe_store import load_probe
from app.services.jobs.probe_card import ProbeCardParams, fitted_lie_probe, probe_reading
from app.settings import BUNDLED_DATA
from app.stats.lie_card import slice_row
from app.stats.probe_estimators import (
    ProbeInput,
    _take,
    estimator_layer_curves,
    get_estimator,
)
from app.stats.probe_layers import VALIDATION, parse_layer_rule
from app.stats.probe_thresholds import parse_threshold_rule
from app.stats.probes import LinearProbe
from workers.engines.judge import judge_layers
from workers.engines.models import LoadedModel
from workers.engines.positions import (
    Layout,
    capture_positions,
    chat_layout,
    parse_span_rule,
    text_layout,
)
from workers.engines.replies import generate_replies
from workers.engines.stress_backend import LocalBackend, RemoteBackend
from workers.jobs.judge import load_registered
from workers.jobs.probes import selection_splits
from workers.runner import JobContext, handles

CONTROL_FILE = Path("mt-bench") / "question.jsonl"
CONTROL_TOKENS = 48


def messages_of(payload: dict[str, Any]) -> list[dict[str, str]]:
    """The chat of a response item: system (if any), quiz history, question, response."""
    system = str(payload.get("system") or "")
    head = [{"role": "system", "content": system}] if system else []
    return [
        *head,
        *payload.get("history", ()),
        {"role": "user", "content": str(payload["question"])},
        {"role": "assistant", "content": str(payload["response"])},
    ]


def recipe_inputs(
    loaded: LoadedModel,
    recipe: Recipe,
    payloads: Sequence[dict[str, Any]],
    layers: Sequence[int],
    batch_size: int,
) -> ProbeInput:
    """Activations of ``payloads`` the way ``recipe`` reads them.

    Returns
    -------
    ndarray, shape (n, len(layers), d), or TokenRows
        Token rows for token-level estimators, one row per item otherwise.

    """
    tok = loaded.tokenizer
    layouts: list[Layout]
    if recipe.render == "text":
        layouts = [text_layout(tok, str(p.get("statement") or p["response"])) for p in payloads]
    elif recipe.follow_up:
        replies = generate_replies(
            loaded.model,
            tok,
            [messages_of(p) for p in payloads],
            follow_up=recipe.follow_up,
            max_new_tokens=4,
            batch_size=batch_size,
        )
        layouts = [r.layout for r in replies]
    else:
        layouts = [chat_layout(tok, messages_of(p)) for p in payloads]
    rule = parse_span_rule(recipe.position)
    captured = capture_positions(
        loaded.model,
        layouts,
        {"x": rule},
        layers=layers,
        batch_size=batch_size,
        pad_token_id=tok.pad_token_id,
    )["x"]
    rows = captured.rows
    if get_estimator(recipe.estimator).level == "token":
        return rows
    return np.asarray(rows.values, dtype=np.float64)


def _labels(records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray([r.labels["truth"] == "1" for r in records])
    return y, np.asarray([r.group_key for r in records], dtype=object)


def fit_recipe(
    loaded: LoadedModel, recipe: Recipe, data: Path, p: ProbeCardParams, layers: list[int]
) -> tuple[Any, dict[str, Any]]:
    """Fit ``recipe`` on its training set; the probe and what the card says about the fit."""
    records = TRAINING_SETS[recipe.training](data, p.size, p.seed)
    x = recipe_inputs(loaded, recipe, [r.payload for r in records], layers, p.batch_size)
    y, groups = _labels(records)
    estimator = get_estimator(recipe.estimator)
    rule = parse_layer_rule(recipe.layer_rule)
    if recipe.layer_rule.startswith("best_on:"):
        # Two items leave nothing to validate on: the layer is read off another data set.
        held = statements(data, p.size, p.seed + 1)
        hx = recipe_inputs(loaded, recipe, [r.payload for r in held], layers, p.batch_size)
        hy, _ = _labels(held)
        fit_x, fit_y, fit_g, curve_name = x, y, groups, STATEMENTS_CURVE
        held_out = [(hx, hy)]
    else:
        split = selection_splits(groups, 0.25, 0.01, p.seed)
        train = np.concatenate([split.train, split.test])
        fit_x, fit_y, fit_g = _take(x, train), y[train], groups[train]
        held_out = [(_take(x, split.validation), y[split.validation])]
        curve_name = VALIDATION
    (curve,) = estimator_layer_curves(estimator, fit_x, fit_y, held_out, groups_train=fit_g)
    choice = rule.choose({curve_name: curve}, layers, loaded.info.n_layers)
    probe = estimator.fit(x, y, groups, layer_index=choice.layer_index)
    return probe, {"n": int(y.size), "layer": choice.to_dict()}


def lie_scores(probe: Any, x: ProbeInput) -> np.ndarray:
    """Higher = more likely a lie (the probes score honesty, label truth = 1)."""
    return -np.asarray(probe.decision_function(x), dtype=np.float64)


def control_payloads(data: Path, size: int, loaded: LoadedModel, batch: int, seed: int) -> list:
    """MT-Bench first turns answered greedily by the model: ordinary, honest traffic."""
    lines = (Path(data) / CONTROL_FILE).read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line)["turns"][0] for line in lines if line.strip()]
    chosen = random.Random(f"{seed}:control").sample(questions, min(size, len(questions)))
    chats = [[{"role": "user", "content": q}] for q in chosen]
    replies = generate_replies(
        loaded.model, loaded.tokenizer, chats, max_new_tokens=CONTROL_TOKENS, batch_size=batch
    )
    return [
        {"system": "", "question": q, "response": r.text}
        for q, r in zip(chosen, replies, strict=True)
    ]


def _slices(stress: StressSet) -> list[tuple[str, list[Record], bool]]:
    """(row name, records, per-persona) for a set's card rows."""
    if stress.name == "personas":
        return [
            (f"personas / {c}", [r for r in stress.records if r.payload["condition"] == c], True)
            for c in ("on-policy", "spp", "assistant-prefill")
        ]
    if stress.name == "compliance":
        return [
            (f"compliance / {label}", [r for r in stress.records if r.payload["dataset"] == d], 0)
            for d, label in (("arithmetic", "square"), ("arithmetic-round", "round"))
        ]
    return [(stress.name, stress.records, stress.name == "persona-belief")]


def card_rows(
    loaded: LoadedModel,
    recipe: Recipe,
    probe: Any,
    sets: Sequence[StressSet],
    p: ProbeCardParams,
    layers: list[int],
    threshold: float | None,
) -> list[dict[str, Any]]:
    """One card row per stress-test slice (see :func:`app.stats.lie_card.slice_row`)."""
    rows = []
    for stress in sets:
        for name, records, by_persona in _slices(stress):
            if not records:
                rows.append({"slice": name, "n": 0, "pairs": 0, "auroc": None,
                             "warnings": ["no pairs kept"]})  # fmt: skip
                continue
            payloads = [r.payload for r in records]
            x = recipe_inputs(loaded, recipe, payloads, layers, p.batch_size)
            s = lie_scores(probe, x)
            y, groups = _labels(records)
            rows.append(
                slice_row(
                    name,
                    ~y,
                    s,
                    list(groups),
                    systems=[str(q.get("system", "")) for q in payloads],
                    lengths=[len(str(q["response"])) for q in payloads],
                    logliks=[float(q["loglik"]) for q in payloads],
                    personas=[str(q.get("persona", "")) for q in payloads] if by_persona else None,
                    threshold=threshold,
                    resamples=p.resamples,
                    seed=p.seed,
                )
            )
    return rows


def card_probe(
    name: str, details: dict[str, Any], artifact: dict[str, Any], fingerprint: str
) -> tuple[Recipe, LinearProbe, list[int], dict[str, Any]]:
    """A fitted lie probe as the card uses it: how to capture, the probe, its layer, its fit.

    The probe reads one layer (its own), so only that layer is captured; the capture repeats
    the probe's fit-time reading (:func:`probe_reading`), on the weights it was fitted on
    (``fingerprint``: the loaded model's).

    Raises
    ------
    InvalidInput
        For other weights, or a reading the card cannot repeat.

    """
    if artifact["model_fingerprint"] != fingerprint:
        raise InvalidInput(f"probe {name!r} was fitted on other weights", field="model")
    render, position = probe_reading(artifact["extract"])
    recipe = replace(
        get_recipe("truth-eot"),
        name=name,
        follows=f"probe {name} fitted on {details.get('source_benchmark')}",
        training=str(details.get("source_benchmark")),
        render=render,
        position=position,
        estimator="logistic",
        layer_rule="fitted",
        differs="",
    )
    probe = replace(LinearProbe.from_dict(artifact["probe"]), layer_index=0)
    layer = int(artifact["layer"])
    fit = {"n": int(details.get("n", 0)), "layer": {"rule": "fitted", "layer": layer}}
    return recipe, probe, [layer], fit


def fitted_probe(
    ctx: JobContext, name: str, loaded: LoadedModel
) -> tuple[Recipe, LinearProbe, list[int], dict[str, Any]]:
    """:func:`card_probe` of the stored probe ``name``."""
    details = ctx.read(lambda s: fitted_lie_probe(s, name))
    _, artifact = ctx.read(lambda s: load_probe(s, ctx.store.settings.data_dir, name))
    return card_probe(name, details, artifact, loaded.info.fingerprint)


@handles(ProbeCardParams)
def run_probe_card(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``probe_card`` jobs: see the module docstring."""
    p = ProbeCardParams.from_dict(ctx.params)
    data = Path(BUNDLED_DATA)
    loaded, _ = load_registered(ctx, p.model)
    steps = 4
    ctx.progress(0, steps)
    if p.probe:
        recipe, probe, layers, fit = fitted_probe(ctx, p.probe, loaded)
    else:
        recipe = get_recipe(p.recipe)
        layers = judge_layers(loaded.info.n_layers)
        probe, fit = fit_recipe(loaded, recipe, data, p, layers)
    ctx.progress(1, steps)
    control = control_payloads(data, p.size, loaded, p.batch_size, p.seed)
    cx = recipe_inputs(loaded, recipe, control, layers, p.batch_size)
    threshold = parse_threshold_rule(recipe.threshold).choose(lie_scores(probe, cx))
    ctx.progress(2, steps)
    local = LocalBackend(loaded, p.batch_size)
    generator = (
        RemoteBackend(p.base_url, p.remote_model) if p.base_url and p.remote_model else local
    )
    rows = [r for t in TRUTH_TOPICS for r in read_statement_rows(truth_file(data, t))]
    belief = read_statement_rows(truth_file(data, "cities"))
    opts = StressOptions(questions=p.size, personas=tuple(p.personas), seed=p.seed)
    # Built once per model, server, sizes, personas and seed: every card of them scores the
    # same items (the persona answers are sampled) and the next card skips the build.
    what = {
        "weights": loaded.info.fingerprint,
        "server": [p.base_url, p.remote_model] if generator is not local else None,
        "options": asdict(opts),
    }
    sets, reused = kept_stress_sets(
        ctx.store.settings.data_dir,
        what,
        lambda: build_stress_sets(generator, rows, belief, opts, judge=generator, scorer=local),
    )
    ctx.progress(3, steps)
    value = threshold.value if np.isfinite(threshold.value) else None
    card_table = card_rows(loaded, recipe, probe, sets, p, layers, value)
    ctx.progress(4, steps)
    return {
        "recipe": recipe.name,
        "probe": p.probe or None,
        "follows": recipe.follows,
        "model": p.model,
        "size": p.size,
        "fit": fit,
        "control": {"rule": recipe.threshold, **threshold.to_dict()},
        "sets_reused": reused,
        "sets": {
            s.name: {
                "considered": s.considered,
                "kept_pairs": sum(r.labels["truth"] == "0" for r in s.records),
                "rejections": dict(s.rejections),
                "verification": s.verification,
            }
            for s in sets
        },
        "rows": card_table,
    }
