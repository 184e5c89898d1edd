"""What a benchmark holds: counts, label sets and their values, judges, scored detectors, slices.

These scans cost a few hundred milliseconds on 100,000 instances and several seconds on a
million, so they are memoised per ``(benchmark id, evidence_version)`` when a cache is given,
and kept in the store (``facet_results``) by :func:`keep_facets`, which the server's start-up
warm-up calls: a restarted server reads them instead of scanning.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.attributes import attributes
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.flips import is_two_order_judge
from app.services.evidence.labels import is_latest_original
from app.services.evidence.payload_fields import SLICE_FIELDS, payload_text
from app.sql.cache import VersionedCache
from app.sql.kept_results import keep_result
from app.tables import (
    Benchmark,
    Detector,
    FacetResult,
    Instance,
    Judgment,
    LabelEvent,
    Order,
    Score,
)

FLIP_PREFIX = "flip:"
# Slice fields are discovered on the first rows of a benchmark (importers write the same
# fields on every row); reading every payload would cost a full table scan.
SLICE_SAMPLE_ROWS = 500


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class ValueCount(_Frozen):
    """One value of a label set or slice field and how many instances currently have it."""

    value: str | None
    count: int


class LabelSetFacet(_Frozen):
    """A label set used in the benchmark with the distribution of its current values.

    ``value=None`` counts instances without a current value (never labelled or retracted).
    """

    name: str
    values: list[ValueCount]


class JudgeFacet(_Frozen):
    """A judge with judgments on the benchmark; ``flip_label`` is its derived label set."""

    id: int = Field(exclude=True)
    name: str
    kind: str
    orders: dict[str, int]
    flip_label: str | None


class ScoredDetectorFacet(_Frozen):
    """A detector with scores on the benchmark, with their count and range."""

    id: int = Field(exclude=True)
    name: str
    kind: str
    count: int
    min: float
    max: float


class SliceFacet(_Frozen):
    """A slice field (a payload field such as ``source``) and its values."""

    field: str
    values: list[ValueCount]


class BenchmarkSummary(_Frozen):
    """A benchmark with the counts shown on the benchmark list.

    ``judges`` counts the detectors that judged pairs in both orders (not reward models, which
    score responses alone; :func:`app.services.evidence.flips.is_two_order_judge`).
    """

    name: str
    kind: str
    description: str
    source: str
    licence: str
    data_version: int
    instances: int
    groups: int
    label_sets: int
    judges: int
    scored_detectors: int
    judgments: int


class BenchmarkFacets(_Frozen):
    """Everything the instance table needs to know about a benchmark to build its filters.

    ``judges`` lists the main judge first (one with flip labels, then the most calls).
    """

    id: int
    summary: BenchmarkSummary
    label_sets: list[LabelSetFacet]
    judges: list[JudgeFacet]
    scored_detectors: list[ScoredDetectorFacet]
    slices: list[SliceFacet]

    def label_set(self, name: str) -> LabelSetFacet | None:
        """The label set called ``name``, if the benchmark uses it."""
        return next((s for s in self.label_sets if s.name == name), None)

    def judge(self, name: str) -> JudgeFacet | None:
        """The judge called ``name``, if it judged this benchmark."""
        return next((j for j in self.judges if j.name == name), None)

    def scored_detector(self, name: str) -> ScoredDetectorFacet | None:
        """The detector called ``name``, if it scored this benchmark."""
        return next((d for d in self.scored_detectors if d.name == name), None)

    @property
    def plain_label_sets(self) -> list[LabelSetFacet]:
        """Label sets other than the flip labels of this benchmark's judges."""
        flips = {j.flip_label for j in self.judges}
        return [s for s in self.label_sets if s.name not in flips]


def version_key(bench: Benchmark) -> tuple[int, int, str]:
    """What cached reads of ``bench`` depend on: its data version, and its identity.

    The creation time tells a benchmark from an earlier one that reused its id (a store
    recreated under a running server, a deleted and re-imported benchmark).
    """
    return (bench.id, bench.data_version, bench.created_at.isoformat())


def evidence_key(bench: Benchmark) -> tuple[int, tuple[str, int], str]:
    """What cached reads of ``bench``'s evidence and original labels depend on.

    Like :func:`version_key`, with the ``evidence_version``, which review events (votes,
    adjudications, withdrawals) leave alone: the instance table, its facets and filters read
    original labels only, so a vote does not make them scan a big benchmark again.
    """
    return (bench.id, ("evidence", bench.evidence_version), bench.created_at.isoformat())


# The summary's fields that are the benchmark row's own columns.
_BENCHMARK_COLUMNS = ("name", "kind", "description", "source", "licence", "data_version")


def benchmark_facets(
    session: Session, bench: Benchmark, cache: VersionedCache | None = None
) -> BenchmarkFacets:
    """Counts, label sets, judges, scored detectors and slices of ``bench``.

    Parameters
    ----------
    session : Session
        An open session; nothing is written.
    bench : Benchmark
        The benchmark, as loaded in this session (its ``data_version`` keys the cache).
    cache : VersionedCache, optional
        Memo shared by requests; without one every call scans.

    Returns
    -------
    BenchmarkFacets

    """
    if cache is None:
        return _compute_facets(session, bench)
    key = ("facets", *evidence_key(bench))
    facets = cache.get_or_compute(
        key, lambda: stored_facets(session, bench) or _compute_facets(session, bench)
    )
    return _current_version(facets, bench)


def _current_version(facets: BenchmarkFacets, bench: Benchmark) -> BenchmarkFacets:
    # Facets are kept across review events, which change only the summary's data version.
    if facets.summary.data_version == bench.data_version:
        return facets
    summary = facets.summary.model_copy(update={"data_version": bench.data_version})
    return facets.model_copy(update={"summary": summary})


def stored_facets(session: Session, bench: Benchmark) -> BenchmarkFacets | None:
    """The facets kept for ``bench``'s current evidence version, if any."""
    text = session.scalar(
        select(FacetResult.facets).where(
            FacetResult.benchmark_id == bench.id,
            FacetResult.evidence_version == bench.evidence_version,
        )
    )
    if text is None:
        return None
    return _current_version(_facets_from_json(text), bench)


KEEP_FACETS_FROM = 20_000
"""Benchmarks with at least this many instances have their facets kept in the store; smaller
ones are scanned in well under a second, and a start-up needs no write for them."""


def worth_keeping(facets: BenchmarkFacets) -> bool:
    """Whether ``facets`` are of a benchmark big enough to keep them in the store."""
    return facets.summary.instances >= KEEP_FACETS_FROM


def facets_kept(session: Session, bench: Benchmark) -> bool:
    """Whether facets of ``bench``'s current evidence version are in the store."""
    found = session.scalar(
        select(FacetResult.id).where(
            FacetResult.benchmark_id == bench.id,
            FacetResult.evidence_version == bench.evidence_version,
        )
    )
    return found is not None


def keep_facets(session: Session, bench: Benchmark, facets: BenchmarkFacets) -> None:
    """Store ``facets``, computed on ``bench`` as loaded (its evidence version names them).

    One ``INSERT ... ON CONFLICT DO NOTHING`` (two processes warming up side by side both
    succeed); facets of older evidence versions go. ``bench`` may come from an earlier read
    transaction: facets of a version that has since been superseded are never read.
    """
    keep_result(
        session,
        FacetResult,
        {
            "benchmark_id": bench.id,
            "evidence_version": bench.evidence_version,
            "facets": _facets_to_json(facets),
        },
        version="evidence_version",
        scope=("benchmark_id",),
        unique=("benchmark_id", "evidence_version"),
    )


def _facets_to_json(facets: BenchmarkFacets) -> str:
    # Detector ids are left out of the models' dumps (they are not shown): kept beside them.
    return json.dumps(
        {
            "facets": facets.model_dump(mode="json"),
            "judge_ids": [j.id for j in facets.judges],
            "detector_ids": [d.id for d in facets.scored_detectors],
        }
    )


def _facets_from_json(text: str) -> BenchmarkFacets:
    kept = json.loads(text)
    data = kept["facets"]
    for judge, judge_id in zip(data["judges"], kept["judge_ids"], strict=True):
        judge["id"] = judge_id
    for detector, detector_id in zip(data["scored_detectors"], kept["detector_ids"], strict=True):
        detector["id"] = detector_id
    return BenchmarkFacets.model_validate(data)


def describe_benchmark(
    session: Session, name: str, cache: VersionedCache | None = None
) -> BenchmarkFacets:
    """Facets of the benchmark called ``name``; raises ``NotFound`` otherwise."""
    return benchmark_facets(session, get_benchmark(session, name), cache)


def list_benchmarks(
    session: Session, cache: VersionedCache | None = None
) -> list[BenchmarkSummary]:
    """Every benchmark with its counts, by name."""
    benches = session.scalars(select(Benchmark).order_by(Benchmark.name))
    return [benchmark_facets(session, b, cache).summary for b in benches]


def _compute_facets(session: Session, bench: Benchmark) -> BenchmarkFacets:
    ids = select(Instance.id).where(Instance.benchmark_id == bench.id)
    n_instances, n_groups = session.execute(
        select(func.count(), func.count(func.distinct(Instance.group_key))).where(
            Instance.benchmark_id == bench.id
        )
    ).one()
    label_sets = _label_sets(session, bench.id, n_instances)
    label_names = {s.name for s in label_sets}

    judge_rows = session.execute(
        select(Detector.id, Detector.name, Detector.kind, Judgment.order, func.count())
        .join(Detector, Detector.id == Judgment.detector_id)
        .where(Judgment.instance_id.in_(ids))
        .group_by(Detector.id, Detector.name, Detector.kind, Judgment.order)
    ).all()
    orders: dict[tuple[str, int, str], dict[str, int]] = {}
    for det_id, name, kind, order, count in judge_rows:
        orders.setdefault((name, det_id, kind), {})[order] = count
    judges = [
        JudgeFacet(
            id=det_id,
            name=name,
            kind=kind,
            orders={o.value: by_order.get(o.value, 0) for o in Order},
            flip_label=FLIP_PREFIX + name if FLIP_PREFIX + name in label_names else None,
        )
        for (name, det_id, kind), by_order in sorted(orders.items())
    ]
    # The judge a bare `ab=`/`flip=` condition means comes first: one with flip labels, then
    # the one with the most calls.
    judges.sort(key=lambda j: (j.flip_label is None, -sum(j.orders.values()), j.name))

    scored = [
        ScoredDetectorFacet(id=det_id, name=name, kind=kind, count=count, min=lo, max=hi)
        for det_id, name, kind, count, lo, hi in session.execute(
            select(
                Detector.id,
                Detector.name,
                Detector.kind,
                func.count(),
                func.min(Score.score),
                func.max(Score.score),
            )
            .join(Detector, Detector.id == Score.detector_id)
            .where(Score.instance_id.in_(ids))
            .group_by(Detector.id, Detector.name, Detector.kind)
            .order_by(Detector.name)
        )
    ]
    slices = _slices(session, bench.id, n_instances)
    summary = BenchmarkSummary(
        **attributes(bench, _BENCHMARK_COLUMNS),
        instances=n_instances,
        groups=n_groups,
        label_sets=len(label_sets),
        judges=sum(
            is_two_order_judge(j.kind, [o for o, n in j.orders.items() if n]) for j in judges
        ),
        scored_detectors=len(scored),
        judgments=sum(sum(j.orders.values()) for j in judges),
    )
    return BenchmarkFacets(
        id=bench.id,
        summary=summary,
        label_sets=label_sets,
        judges=judges,
        scored_detectors=scored,
        slices=slices,
    )


def _label_sets(session: Session, bench_id: int, n_instances: int) -> list[LabelSetFacet]:
    counts: dict[str, Counter[str]] = {}
    for name, value, count in session.execute(
        select(LabelEvent.label_name, LabelEvent.value, func.count())
        .join(Instance, Instance.id == LabelEvent.instance_id)
        .where(Instance.benchmark_id == bench_id, is_latest_original())
        .group_by(LabelEvent.label_name, LabelEvent.value)
    ):
        bucket = counts.setdefault(name, Counter())
        if value is not None:
            bucket[value] += count
    out = []
    for name in sorted(counts):
        values = [ValueCount(value=v, count=c) for v, c in sorted(counts[name].items())]
        unlabelled = n_instances - sum(counts[name].values())
        values.append(ValueCount(value=None, count=unlabelled))
        out.append(LabelSetFacet(name=name, values=values))
    return out


def _slices(session: Session, bench_id: int, n_instances: int) -> list[SliceFacet]:
    if n_instances == 0:
        return []
    dialect = session.get_bind().dialect.name
    sample_cols = [payload_text(dialect, f).label(f) for f in SLICE_FIELDS]
    sample = session.execute(
        select(*sample_cols)
        .where(Instance.benchmark_id == bench_id)
        .order_by(Instance.external_id)
        .limit(SLICE_SAMPLE_ROWS)
    ).all()
    present: Sequence[str] = [
        f for k, f in enumerate(SLICE_FIELDS) if any(row[k] is not None for row in sample)
    ]
    out = []
    for field in present:
        expr = payload_text(dialect, field)
        rows = session.execute(
            select(expr, func.count()).where(Instance.benchmark_id == bench_id).group_by(expr)
        ).all()
        values = sorted(
            (ValueCount(value=None if v is None else str(v), count=c) for v, c in rows),
            key=lambda vc: (vc.value is None, vc.value or ""),
        )
        out.append(SliceFacet(field=field, values=values))
    return out
