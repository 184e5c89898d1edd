"""Probe jobs: a judge's flip probe with baselines, lie-detector probes, applying frozen probes.

Each job reads its inputs in one short transaction, fits outside any transaction, and writes
detectors, scores and artifacts in one final transaction (a rerun replaces them as a whole).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupShuffleSplit
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.activation_sets import get_activation_set
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.detectors import ensure_detector
from app.services.evidence.probe_store import load_probe, put_detector, save_probe
from app.services.evidence.scores import replace_scores

# The job kinds are declared where the dashboard and the CLI queue them (re-exported here).
from app.services.jobs.apply_probe import ApplyParams
from app.services.jobs.extract import ExtractParams
from app.services.jobs.fit_lie_probe import FitLieParams
from app.services.jobs.fit_probe import FitFlipParams
from app.stats.probes import (
    BASELINE_FEATURES,
    LinearProbe,
    NestedCVResult,
    earliest_best_layer,
    layer_auroc_curves,
    nested_cv,
    select_then_refit,
)
from workers.engines.activations import read_activation_set
from workers.engines.probe_data import ProbeData, flip_data, labelled_activations
from workers.jobs.extract import capture_benchmark
from workers.runner import JobContext, handles

ARTIFACT_FORMAT = "appellate-probe-1"


def _auroc(y: np.ndarray, p: np.ndarray) -> float:
    return float(roc_auc_score(y, p))


def _cv_details(data: ProbeData, cv: NestedCVResult, lambdas: list[float]) -> dict[str, Any]:
    """Per-fold choices (HF layer index, lambda, inner Brier grid) for the probes page."""
    return {
        "benchmark": data.benchmark,
        "label": data.label,
        "activation_set": data.activation_set,
        "layers": data.layers,
        "lambdas": lambdas,
        "n": int(data.y.size),
        "prevalence": float(data.y.mean()),
        "oof_auroc": _auroc(data.y, cv.oof),
        "folds": [
            {
                "fold": c.outer_fold,
                "layer": data.layers[c.layer_index] if data.layers else c.layer_index,
                "lambda": c.lam,
                "inner_brier": np.asarray(c.inner_brier).round(6).tolist(),
            }
            for c in cv.choices
        ],
        "training_fingerprint": data.fingerprint,
    }


def _oof_scores(data: ProbeData, cv: NestedCVResult, layers: list[int] | None) -> dict:
    by_fold = {c.outer_fold: c for c in cv.choices}
    out = {}
    for k, iid in enumerate(data.instance_ids):
        choice = by_fold[int(cv.fold[k])]
        details: dict[str, Any] = {"fold": int(cv.fold[k]), "lambda": choice.lam}
        if layers is not None:
            details["layer"] = layers[choice.layer_index]
        out[int(iid)] = (float(cv.oof[k]), details)
    return out


def _artifact(
    data: ProbeData, probe: LinearProbe, grid: np.ndarray, extra: dict[str, Any]
) -> dict[str, Any]:
    return {
        "format": ARTIFACT_FORMAT,
        "source_benchmark": data.benchmark,
        "label": data.label,
        "activation_set": data.activation_set,
        "model_fingerprint": data.model_fingerprint,
        "layer": data.layers[probe.layer_index],
        "lambda": probe.lam,
        "C": probe.c,
        "source_prevalence": float(data.y.mean()),
        "training_fingerprint": data.fingerprint,
        "cv_brier_grid": np.asarray(grid).round(6).tolist(),
        "probe": probe.to_dict(),
        **extra,
    }


@handles(FitFlipParams)
def run_fit_probe(ctx: JobContext) -> dict[str, Any]:
    """Flip probe by nested grouped CV, its baselines on the same folds, and a frozen probe.

    Baselines: the six-feature model and each single feature. The frozen probe takes its
    hyperparameters from grouped CV on all items and is refitted once on all of them.
    """
    p = FitFlipParams.from_dict(ctx.params)
    data_dir = ctx.store.settings.data_dir

    def read(session: Session) -> tuple[ProbeData, dict[str, Any] | None]:
        if not p.shared:
            return flip_data(session, data_dir, p.benchmark, p.judge, p.activation_set), None
        aset, folds = p.shared_plan(session)  # refuses a probe that is not estimable
        data = flip_data(
            session, data_dir, p.benchmark, p.judge, p.activation_set, aset.instance_ids
        )
        plan = {"judges": list(aset.judges), "n": aset.n, "splits": folds.splits}
        return data, plan

    data, shared = ctx.read(read)
    assert data.features is not None
    stages = 3 + len(BASELINE_FEATURES)
    ctx.progress(0, stages)
    kw: dict[str, Any] = {"lambdas": tuple(p.lambdas), "outer": p.outer, "inner": p.inner}
    kw["seed"] = p.seed
    if shared is not None:
        # Every shared judge's probe and baselines on the same outer folds.
        kw["outer_splits"] = shared["splits"]
    cv = nested_cv(data.x, data.y, data.groups, **kw)
    ctx.progress(1, stages)
    same = {**kw, "outer_splits": cv.outer_splits}
    baselines = {"": nested_cv(data.features, data.y, data.groups, **same)}
    ctx.progress(2, stages)
    for k, feature in enumerate(BASELINE_FEATURES):
        baselines[feature] = nested_cv(data.features[:, [k]], data.y, data.groups, **same)
        ctx.progress(3 + k, stages)
    frozen, grid = select_then_refit(
        data.x, data.y, data.groups, lambdas=tuple(p.lambdas), folds=p.outer, seed=p.seed
    )
    probe_name = f"probe:{p.judge}"
    frozen_name = f"{probe_name}@{p.benchmark}"

    def write(session: Session) -> dict[str, Any]:
        bench = get_benchmark(session, p.benchmark)
        details = _cv_details(data, cv, p.lambdas)
        if shared is not None:
            details["shared"] = {"judges": shared["judges"], "n": shared["n"], "seed": p.seed}
        detector = put_detector(
            session, probe_name, "probe", {**details, "kind": "flip", "judge": p.judge},
            f"flip probe of {p.judge}: out-of-fold predictions of nested grouped CV",
        )  # fmt: skip
        replace_scores(session, detector, bench, _oof_scores(data, cv, data.layers))
        summary = {"probe": details["oof_auroc"]}
        for feature, result in baselines.items():
            name = f"baseline:{p.judge}:{feature}" if feature else f"baseline:{p.judge}"
            b_details = {
                "kind": "flip-baseline",
                "judge": p.judge,
                "features": [feature] if feature else list(BASELINE_FEATURES),
                "n": int(data.y.size),
                "oof_auroc": _auroc(data.y, result.oof),
                "folds": [{"fold": c.outer_fold, "lambda": c.lam} for c in result.choices],
            }
            if shared is not None:
                b_details["shared"] = details["shared"]
            base = put_detector(session, name, "baseline", b_details)
            replace_scores(session, base, bench, _oof_scores(data, result, None))
            summary[name] = b_details["oof_auroc"]
        save_probe(
            session,
            data_dir,
            frozen_name,
            _artifact(data, frozen, grid, {"kind": "flip", "judge": p.judge}),
            {
                "kind": "flip-frozen",
                "judge": p.judge,
                "source_benchmark": p.benchmark,
                "source_prevalence": float(data.y.mean()),
                "layer": data.layers[frozen.layer_index],
                "lambda": frozen.lam,
                "C": frozen.c,
                "training_fingerprint": data.fingerprint,
            },
            f"frozen flip probe of {p.judge} fitted on {p.benchmark}",
        )
        return summary

    summary = ctx.commit(write, done=stages, total=stages)
    return {
        "probe": probe_name,
        "frozen": frozen_name,
        "n": int(data.y.size),
        "flips": int(data.y.sum()),
        "oof_auroc": summary,
    }


@dataclass(frozen=True)
class SelectionSplits:
    """Item indices of a lie probe's three grouped splits.

    Probes are fitted on ``train``, the layer is picked on ``validation``, and the reported
    curve is measured on ``test``, which played no part in the choice.
    """

    train: np.ndarray
    validation: np.ndarray
    test: np.ndarray

    def sizes(self) -> dict[str, int]:
        """Items per split, for the probe's details."""
        return {k: int(getattr(self, k).size) for k in ("train", "validation", "test")}


def selection_splits(
    groups: np.ndarray, val_fraction: float, test_fraction: float, seed: int
) -> SelectionSplits:
    """Three disjoint grouped splits: no group has items in two of them.

    Parameters
    ----------
    groups : ndarray, shape (n,)
        Group per item (duplicate statements already share one: :class:`ProbeData`).
    val_fraction, test_fraction : float
        Shares of the groups in the validation and test splits (each in (0, 1), summing
        below 1).
    seed : int
        Seed of both group shuffles.

    Returns
    -------
    SelectionSplits

    """
    if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
        raise InvalidInput(
            f"val_fraction {val_fraction} and test_fraction {test_fraction} must be in (0, 1) "
            "and sum below 1",
            field="val_fraction",
        )
    index = np.arange(groups.size)
    outer = GroupShuffleSplit(n_splits=1, test_size=test_fraction, random_state=seed)
    rest, test = next(outer.split(index, groups=groups))
    # The validation share is of all items, so of the rest it is a larger fraction.
    inner = GroupShuffleSplit(
        n_splits=1, test_size=val_fraction / (1 - test_fraction), random_state=seed + 1
    )
    train, val = next(inner.split(rest, groups=groups[rest]))
    return SelectionSplits(np.sort(rest[train]), np.sort(rest[val]), np.sort(test))


@handles(FitLieParams)
def run_fit_lie_probe(ctx: JobContext) -> dict[str, Any]:
    """Fit and freeze a lie-detector probe at the earliest layer with the best validation AUROC.

    Activations are captured first when missing. Per layer a probe is fitted on the training
    split; the layer is chosen on the validation split and the curve reported from the
    separate test split (grouped splits, duplicate statements in one group). Lambda is then
    chosen by grouped CV at that layer and the probe refitted on everything.
    """
    p = FitLieParams.from_dict(ctx.params)
    spec = ExtractParams(benchmark=p.benchmark, **p.extract)
    captured = capture_benchmark(ctx, spec)
    data_dir = ctx.store.settings.data_dir
    data = ctx.read(
        lambda s: labelled_activations(
            s, data_dir, p.benchmark, p.label, captured["activation_set"]
        )
    )
    split = selection_splits(data.groups, p.val_fraction, p.test_fraction, p.seed)
    validation, test = layer_auroc_curves(
        data.x[split.train],
        data.y[split.train],
        [
            (data.x[split.validation], data.y[split.validation]),
            (data.x[split.test], data.y[split.test]),
        ],
    )
    best = earliest_best_layer(validation)
    layer_x = data.x[:, best, :]
    probe, grid = select_then_refit(
        layer_x, data.y, data.groups, lambdas=tuple(p.lambdas), folds=p.folds, seed=p.seed
    )
    probe = LinearProbe(**{**asdict(probe), "layer_index": best})
    extract_spec = {
        k: v for k, v in asdict(spec).items() if k not in ("benchmark", "name", "limit")
    }
    details = {
        "kind": "lie",
        "source_benchmark": p.benchmark,
        "label": p.label,
        "activation_set": data.activation_set,
        "layers": data.layers,
        # The curve the layer was picked on, and the one reported: a separate split.
        "validation_auroc": np.asarray(validation).round(6).tolist(),
        "test_auroc": np.asarray(test).round(6).tolist(),
        "reported_curve": "test",
        "splits": {**split.sizes(), "groups": len(set(data.groups.tolist()))},
        "layer": data.layers[best],
        "lambda": probe.lam,
        "C": probe.c,
        "n": int(data.y.size),
        "source_prevalence": float(data.y.mean()),
        "training_fingerprint": data.fingerprint,
        "extract": extract_spec,
    }
    artifact = _artifact(data, probe, grid, {"kind": "lie", "extract": extract_spec})
    ctx.commit(
        lambda s: save_probe(s, data_dir, p.name, artifact, details, f"lie probe on {p.benchmark}")
    )
    return {
        "probe": p.name,
        "layer": data.layers[best],
        "validation_auroc": details["validation_auroc"],
        "test_auroc": details["test_auroc"],
    }


def _target_set(ctx: JobContext, p: ApplyParams, artifact: dict[str, Any]) -> str:
    """The activation set of the target: given, the judge's capture, or extracted now."""
    if p.activation_set:
        return p.activation_set
    if artifact.get("kind") == "flip":
        return f"judge:{artifact['judge']}:{p.benchmark}"
    spec = {**artifact["extract"], **p.fields}
    # Named by what is captured, not by the probe: probes that read the same way (the lie and
    # forced-opposite variants) share one capture of the benchmark.
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    name = f"extract:{spec['model']}:{p.benchmark}:{digest}"
    return capture_benchmark(ctx, ExtractParams(benchmark=p.benchmark, name=name, **spec))[
        "activation_set"
    ]


@handles(ApplyParams)
def run_apply_probe(ctx: JobContext) -> dict[str, Any]:
    """Apply a frozen probe to a benchmark's activations (same model, same layer)."""
    return apply_frozen(ctx, ApplyParams.from_dict(ctx.params))


def apply_frozen(ctx: JobContext, p: ApplyParams) -> dict[str, Any]:
    """Score ``p.benchmark`` with the frozen probe ``p.probe`` (replacing its scores there)."""
    data_dir = ctx.store.settings.data_dir
    _, artifact = ctx.read(lambda s: load_probe(s, data_dir, p.probe))
    set_name = _target_set(ctx, p, artifact)

    def read(session: Session) -> tuple[list[int], np.ndarray]:
        aset = get_activation_set(session, set_name)
        if aset.model_fingerprint != artifact["model_fingerprint"]:
            raise InvalidInput(
                f"activation set {set_name!r} comes from other weights than the probe's",
                field="activation_set",
            )
        arr = read_activation_set(data_dir, aset)
        if artifact["layer"] not in arr.layers:
            raise InvalidInput(
                f"activation set {set_name!r} lacks the probe's layer {artifact['layer']}",
                field="activation_set",
            )
        return arr.instance_ids, arr.values[:, arr.layers.index(artifact["layer"]), :]

    ids, x = ctx.read(read)
    probe = LinearProbe.from_dict(artifact["probe"])
    scores = probe.predict_proba(np.asarray(x, dtype=np.float64))

    def write(session: Session) -> int:
        detector = ensure_detector(session, p.probe, "probe")
        details = {"applied_from": artifact["source_benchmark"], "layer": artifact["layer"]}
        return replace_scores(
            session,
            detector,
            get_benchmark(session, p.benchmark),
            {iid: (float(s), details) for iid, s in zip(ids, scores, strict=True)},
        )

    n = ctx.commit(write, done=1, total=1)
    return {"probe": p.probe, "benchmark": p.benchmark, "scored": n, "activation_set": set_name}
