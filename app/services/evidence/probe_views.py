"""What the probes page shows: a card per probe and baseline, and the names its forms offer.

A card holds the probe's data, its fold choices and the curve its layer was chosen on:
validation AUROC by layer for lie-detector probes (with the held-out test curve that is
reported), each outer fold's best inner-fold Brier by layer for flip probes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.evidence.language_models import list_language_models
from app.services.evidence.probe_store import list_probes
from app.tables import Benchmark, Detector


@dataclass(frozen=True)
class LayerCurve:
    """Values per layer, one list per series (``None`` leaves a gap), for the card's plot."""

    title: str
    layers: list[int]
    series: list[tuple[str, list[float | None]]]
    y_label: str
    marked: int | None = None


@dataclass(frozen=True)
class ProbeCard:
    """A probe or baseline: its fit details, what it was fitted on, and its layer curve."""

    name: str
    kind: str
    details: dict[str, Any]
    benchmark: str | None
    label: str | None
    curve: LayerCurve | None
    frozen: bool


def layer_curve(detector: Detector) -> LayerCurve | None:
    """The curve the probe's layer was chosen on, or None (baselines, probes without layers)."""
    d = detector.details or {}
    layers = d.get("layers") or []
    if d.get("validation_auroc") and layers:
        # Lie probes since held-out test curves: the layer is picked on validation, the
        # curve to read is the test split's, which played no part in the choice.
        series = [("validation AUROC (picks the layer)", d["validation_auroc"])]
        if d.get("test_auroc"):
            series.append(("test AUROC (reported)", d["test_auroc"]))
        return LayerCurve(
            f"validation AUROC by layer: {detector.name}", layers, series,
            y_label="AUROC", marked=d.get("layer"),
        )  # fmt: skip
    folds = [f for f in d.get("folds", []) if f.get("inner_brier")]
    if folds and layers:
        series = [(f"fold {f['fold']}", [min(row) for row in f["inner_brier"]]) for f in folds]
        return LayerCurve(
            f"inner-fold Brier by layer: {detector.name}", layers, series,
            y_label="best inner Brier",
        )  # fmt: skip
    return None


def probe_card(detector: Detector) -> ProbeCard:
    """The card of a probe or baseline detector."""
    d = detector.details or {}
    return ProbeCard(
        name=detector.name,
        kind=detector.kind,
        details=d,
        benchmark=d.get("benchmark") or d.get("source_benchmark"),
        label=d.get("label") or (f"flip:{d['judge']}" if d.get("judge") else None),
        curve=layer_curve(detector),
        frozen=bool(d.get("artifact")),
    )


@dataclass(frozen=True)
class ProbesPage:
    """Every probe card, and the benchmarks, judges and models the fit and apply forms offer."""

    cards: list[ProbeCard]
    benchmarks: list[Benchmark]
    judges: list[str]
    models: list[str]

    @property
    def frozen(self) -> list[str]:
        """Names of the probes that can be applied to another benchmark."""
        return [c.name for c in self.cards if c.frozen]

    @property
    def lie_probes(self) -> list[str]:
        """Names of the frozen lie probes (``probe fit-lie``): those a report card can take."""
        return [c.name for c in self.cards if c.frozen and c.details.get("kind") == "lie"]


def probes_page(session: Session) -> ProbesPage:
    """Probes and baselines by name, with the benchmarks, judges and models by name."""
    judges = select(Detector.name).where(Detector.kind == "judge").order_by(Detector.name)
    return ProbesPage(
        cards=[probe_card(d) for d in list_probes(session)],
        benchmarks=list(session.scalars(select(Benchmark).order_by(Benchmark.name))),
        judges=list(session.scalars(judges)),
        models=[m.name for m in list_language_models(session)],
    )
