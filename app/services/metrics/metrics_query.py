"""One metrics request: the validated query, and what it reads from the store, read once.

A metrics page, API call or CLI command builds one :class:`MetricsQuery` and loads one
:class:`MetricsData`; the metric rows, comparisons, judge summaries and plots all read it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TypedDict, Unpack

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.binary_target import BinaryTarget
from app.services.evidence.labelled_items import (
    LabelledItems,
    LabelMode,
    ab_choices,
    check_label_mode,
    data_key,
    detector_scores,
    get_detector,
    label_key,
    load_labelled,
    scored_detectors,
)
from app.services.evidence.resolution import check_k
from app.sql.cache import VersionedCache
from app.stats import _validate
from app.stats.bootstrap import BootstrapResult
from app.tables import Benchmark, Detector

__all__ = [
    "METRICS_CACHE",
    "MetricsData",
    "MetricsQuery",
    "QueryOptions",
    "Sample",
    "load_metrics_data",
    "metrics_query",
]

METRICS_CACHE = VersionedCache(maxsize=512)
"""Process-wide memo of metric rows and comparisons, keyed on the benchmark's ``data_version``."""


@dataclass(frozen=True)
class MetricsQuery:
    """What a metrics request asks for; checked when built (:class:`InvalidInput`).

    Attributes
    ----------
    benchmark : str
        Benchmark name.
    label : str
        Label set the detectors are measured against.
    labels : {"original", "resolved"}
        Its original values, or the values after review (see
        :func:`app.services.evidence.labelled_items.load_labelled`).
    k : int
        Agreeing voters that override the original (resolved labels; checked either way).
    positive : str, optional
        Explicit positive class (see :func:`app.services.evidence.binary_target.binary_target`).
    detectors : tuple of str, optional
        Detector names, duplicates dropped; ``None`` (or empty): every scored detector.
    slice_field : str, optional
        Payload field whose value is each item's slice.
    resamples, seed : int
        Group-bootstrap resamples and root seed.

    """

    benchmark: str
    label: str = "reference"
    labels: LabelMode = "original"
    k: int = 2
    positive: str | None = None
    detectors: tuple[str, ...] | None = None
    slice_field: str | None = None
    resamples: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        try:
            resamples = _validate.resample_count(self.resamples)
            seed = _validate.seed_value(self.seed)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
        check_label_mode(self.labels)
        check_k(self.k)
        detectors = tuple(dict.fromkeys(self.detectors)) if self.detectors else None
        # Normalised in place: the dataclass is frozen so that a query can be a cache key.
        object.__setattr__(self, "resamples", resamples)
        object.__setattr__(self, "seed", seed)
        object.__setattr__(self, "detectors", detectors)


class QueryOptions(TypedDict, total=False):
    """The optional fields of a :class:`MetricsQuery` as keyword arguments (its defaults)."""

    slice_field: str | None
    positive: str | None
    resamples: int
    seed: int
    labels: LabelMode
    k: int


def metrics_query(
    benchmark: str,
    label: str = "reference",
    detectors: Sequence[str] | None = None,
    **options: Unpack[QueryOptions],
) -> MetricsQuery:
    """The query of loose parameters (``detectors`` a sequence; ``None`` or empty: all)."""
    return MetricsQuery(benchmark, label, detectors=tuple(detectors or ()), **options)


@dataclass(frozen=True)
class Sample:
    """The labelled items scored by some detectors: labels, scores, groups, strata, slices.

    Arrays share the item order; ``scores`` holds one (n,) array per detector, in the order
    they were asked for.
    """

    y: NDArray[np.int8]
    scores: tuple[NDArray[np.float64], ...]
    groups: NDArray[np.intp]
    strata: NDArray[np.str_] | None
    slices: NDArray[np.str_] | None

    @property
    def n(self) -> int:
        """Number of items."""
        return int(self.y.size)

    def where(self, mask: NDArray[np.bool_]) -> Sample:
        """The items where ``mask`` (shape (n,)) is true."""
        return Sample(
            self.y[mask],
            tuple(p[mask] for p in self.scores),
            self.groups[mask],
            None if self.strata is None else self.strata[mask],
            None if self.slices is None else self.slices[mask],
        )


@dataclass(frozen=True)
class MetricsData:
    """Everything a metrics request reads: its items and target, detectors, strata, scores.

    Each detector's scores are read on first use and kept, so rows, comparisons and plots of
    one request share one read (and a request served from the cache reads none).

    Attributes
    ----------
    query : MetricsQuery
    items : LabelledItems
        The labelled items (with slices when the query names a slice field).
    detectors : tuple of Detector
        The detectors of the matrix: the query's, else every scored one.
    scored : tuple of Detector
        Every detector with a score on the benchmark, by name.
    strata : list of str, optional
        The judge's AB choice per item, for ``flip:<judge>`` label sets.
    key : tuple
        The part of every cache key that identifies these items and this target.

    """

    query: MetricsQuery
    items: LabelledItems
    detectors: tuple[Detector, ...]
    scored: tuple[Detector, ...]
    strata: list[str] | None
    key: tuple[Hashable, ...]
    read_scores: Callable[[Detector], NDArray[np.float64]] = field(repr=False, compare=False)
    _scores: dict[int, NDArray[np.float64]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # Each detector's bootstrap on every item it scored, as the matrix computed it: paired
    # differences of detectors that scored the same items are differences of these replicates.
    bootstraps: dict[int, BootstrapResult] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def benchmark(self) -> Benchmark:
        """The benchmark row."""
        return self.items.benchmark

    @property
    def target(self) -> BinaryTarget:
        """The binary target of the label set."""
        return self.items.target

    def scores(self, detector: Detector) -> NDArray[np.float64]:
        """The detector's score of each item, NaN where it has none; shape (n_items,)."""
        if detector.id not in self._scores:
            self._scores[detector.id] = self.read_scores(detector)
        return self._scores[detector.id]

    @cached_property
    def _all_items(self) -> Sample:
        # Groups, strata and slices as arrays once per request, for every sample to mask.
        # Groups as integer codes in sorted key order: the bootstrap numbers its units the same
        # way (identical resamples), and encoding ints per detector is cheap where encoding
        # 100,000 strings each time is not.
        items = self.items
        return Sample(
            items.y,
            (),
            np.unique(np.asarray(items.groups), return_inverse=True)[1],
            None if self.strata is None else np.asarray(self.strata),
            None if items.slices is None else np.asarray(items.slices),
        )

    def sample(self, *detectors: Detector) -> Sample:
        """The items every one of ``detectors`` scored, with their scores in that order."""
        scores = tuple(self.scores(d) for d in detectors)
        kept = ~np.any(np.isnan(np.stack(scores)), axis=0)
        return replace(self._all_items, scores=scores).where(kept)


def load_metrics_data(session: Session, query: MetricsQuery) -> MetricsData:
    """Read what ``query`` needs: the labelled items once, scores later on demand.

    Raises
    ------
    NotFound
        Unknown benchmark, label set or detector.
    InvalidInput
        Label set not binary, or a malformed slice field.

    """
    bench = get_benchmark(session, query.benchmark)
    chosen = [get_detector(session, name) for name in query.detectors or ()]
    items = load_labelled(
        session,
        bench,
        query.label,
        positive=query.positive,
        slice_field=query.slice_field,
        labels=query.labels,
        k=query.k,
    )
    scored = tuple(scored_detectors(session, bench))
    key = (
        *data_key(session, bench),
        query.label,
        items.target.positive,
        *label_key(query.labels, query.k),
    )
    return MetricsData(
        query=query,
        items=items,
        detectors=tuple(chosen) if query.detectors else scored,
        scored=scored,
        strata=ab_choices(session, items),
        key=key,
        read_scores=lambda detector: detector_scores(session, detector, items),
    )
