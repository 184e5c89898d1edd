"""Layer rules of a probe recipe: which captured layer the probe reads, and early-layer controls.

A rule reads per-layer AUROC curves keyed by data set name (``"validation"`` is the held-out
split of the training set; any other name is a separate labelled set, e.g. a development set of
another distribution) and returns a :class:`LayerChoice`. Early layers (the embeddings and the
first blocks) are reported beside the choice as controls: a probe that already separates the
classes there reads surface features of the text (words, length), not a late representation
of truthfulness.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from app.stats import _validate
from app.stats.probes import earliest_best_layer

__all__ = [
    "EARLY_FRACTION",
    "LAYER_RULES",
    "VALIDATION",
    "EarliestBest",
    "FixedDepth",
    "LayerChoice",
    "LayerRule",
    "best_on_dataset",
    "early_layer_controls",
    "parse_layer_rule",
]

VALIDATION = "validation"
"""Curve key of the training set's held-out validation split."""

EARLY_FRACTION = 0.1
"""Layers up to ``ceil(EARLY_FRACTION * n_blocks)`` (the embeddings included) are controls."""


def early_layer_controls(
    curve: ArrayLike,
    layers: Sequence[int],
    n_blocks: int,
    *,
    fraction: float = EARLY_FRACTION,
) -> dict[int, float]:
    """AUROC at the captured early layers.

    Parameters
    ----------
    curve : array-like of float, shape (n_layers,)
        AUROC per captured layer column.
    layers : sequence of int, length n_layers
        HF ``hidden_states`` index of each column (0 = embeddings).
    n_blocks : int
        Decoder blocks of the model.
    fraction : float
        Share of the depth counted as early.

    Returns
    -------
    dict of int to float
        ``{layer: auroc}`` for the captured layers ``<= ceil(fraction * n_blocks)``; empty when
        none was captured.

    """
    arr = _validate.scores(curve, name="curve")
    if len(layers) != arr.size:
        raise ValueError(f"{len(layers)} layers for a curve of {arr.size} columns")
    if not 0 < fraction < 1 or n_blocks < 1:
        raise ValueError("fraction must be in (0, 1) and n_blocks >= 1")
    limit = math.ceil(fraction * n_blocks)
    return {int(layer): float(arr[k]) for k, layer in enumerate(layers) if layer <= limit}


@dataclass(frozen=True)
class LayerChoice:
    """The chosen layer column, the curve it was chosen on, and the early-layer controls.

    ``layer_index`` indexes the captured layer axis and ``layer`` is its HF index; ``source`` is
    the name of the curve the rule read; ``controls`` maps early layers to their AUROC on it.
    """

    rule: str
    source: str
    layer_index: int
    layer: int
    curve: tuple[float, ...]
    controls: dict[int, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "rule": self.rule,
            "source": self.source,
            "layer_index": self.layer_index,
            "layer": self.layer,
            "curve": list(self.curve),
            "controls": {str(k): v for k, v in self.controls.items()},
        }


class LayerRule(Protocol):
    """Chooses a layer column from per-layer curves keyed by data set name."""

    @property
    def name(self) -> str:
        """The rule's registry name."""
        ...

    def choose(
        self, curves: Mapping[str, ArrayLike], layers: Sequence[int], n_blocks: int
    ) -> LayerChoice:
        """The choice; ``curves[name]`` has shape (n_layers,), ``layers`` the HF indices."""
        ...


def _curve(curves: Mapping[str, ArrayLike], key: str, layers: Sequence[int]) -> NDArray[Any]:
    if key not in curves:
        raise ValueError(f"the layer rule reads the curve {key!r}; have {sorted(curves)}")
    arr = _validate.scores(curves[key], name=f"curve {key!r}")
    if arr.size != len(layers):
        raise ValueError(f"curve {key!r} has {arr.size} columns for {len(layers)} layers")
    return arr


def _choice(
    rule: str,
    source: str,
    arr: NDArray[Any] | None,
    index: int,
    layers: Sequence[int],
    n_blocks: int,
) -> LayerChoice:
    if arr is None:  # a rule that read no curve and was given none to report
        return LayerChoice(rule, source, index, int(layers[index]), ())
    controls = early_layer_controls(arr, layers, n_blocks)
    return LayerChoice(rule, source, index, int(layers[index]), tuple(map(float, arr)), controls)


@dataclass(frozen=True)
class EarliestBest:
    """The earliest layer whose curve on ``source`` reaches its maximum (within ``tol``)."""

    source: str = VALIDATION
    tol: float = 0.0

    @property
    def name(self) -> str:
        """``earliest_best`` on the validation split, else ``best_on:<source>``."""
        return "earliest_best" if self.source == VALIDATION else f"best_on:{self.source}"

    def choose(
        self, curves: Mapping[str, ArrayLike], layers: Sequence[int], n_blocks: int
    ) -> LayerChoice:
        """See :func:`app.stats.probes.earliest_best_layer`."""
        arr = _curve(curves, self.source, layers)
        index = earliest_best_layer(arr, self.tol)
        return _choice(self.name, self.source, arr, index, layers, n_blocks)


def best_on_dataset(dataset: str, tol: float = 0.0) -> EarliestBest:
    """The earliest best layer on another named data set (not the training set's validation)."""
    if not dataset or dataset == VALIDATION:
        raise ValueError("name the other data set the layer is chosen on")
    return EarliestBest(source=dataset, tol=tol)


@dataclass(frozen=True)
class FixedDepth:
    """The captured layer nearest ``fraction`` of the model's depth (no data read)."""

    fraction: float

    def __post_init__(self) -> None:
        if not 0 <= self.fraction <= 1:
            raise ValueError(f"fraction must be in [0, 1], got {self.fraction!r}")

    @property
    def name(self) -> str:
        """``depth:<fraction>``."""
        return f"depth:{self.fraction:g}"

    def choose(
        self, curves: Mapping[str, ArrayLike], layers: Sequence[int], n_blocks: int
    ) -> LayerChoice:
        """Nearest captured layer to ``fraction * n_blocks`` (the shallower one on a tie)."""
        target = self.fraction * n_blocks
        index = int(np.argmin([abs(layer - target) for layer in layers]))
        if not layers:
            raise ValueError("no captured layers to choose from")
        source = VALIDATION if VALIDATION in curves else next(iter(curves), "")
        arr = _curve(curves, source, layers) if source else None
        return _choice(self.name, source, arr, index, layers, n_blocks)


LAYER_RULES: dict[str, LayerRule] = {
    "earliest_best": EarliestBest(),
    "depth:0.5": FixedDepth(0.5),
}
"""Named layer rules; :func:`parse_layer_rule` also reads ``best_on:<set>`` and ``depth:<f>``."""


def parse_layer_rule(text: str) -> LayerRule:
    """A registered rule, ``best_on:<data set>`` or ``depth:<fraction>``; ValueError otherwise."""
    if text in LAYER_RULES:
        return LAYER_RULES[text]
    kind, _, arg = text.partition(":")
    try:
        if kind == "best_on":
            return best_on_dataset(arg)
        if kind == "depth":
            return FixedDepth(float(arg))
    except ValueError:
        pass
    raise ValueError(
        f"unknown layer rule {text!r}; one of {', '.join(LAYER_RULES)}, best_on:<set>, depth:<f>"
    )
