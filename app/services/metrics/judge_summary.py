"""Pairwise judge summary: retention, flip rate with interval, accuracies and order controls.

Read straight from the judgments (the flip rule is :func:`app.services.evidence.flips.flip_value`),
so the numbers never lag behind derived labels.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import null, select
from sqlalchemy.orm import Session

from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.flips import flip_value, is_two_order_judge
from app.services.evidence.judge_scores import Verdict, judge_orders
from app.services.evidence.labelled_items import LabelMode, data_key, label_key
from app.services.evidence.labels import current_label_subquery
from app.services.evidence.resolution import resolved_values
from app.services.metrics.metrics_query import MetricsData, MetricsQuery
from app.sql.cache import VersionedCache
from app.stats.bootstrap import bootstrap_mean
from app.tables import Benchmark, Choice, Detector, Instance, Order

__all__ = [
    "JudgeSummary",
    "judge_summaries",
    "judge_summaries_of",
]

# The AB-order verdict decides the pair; the reference names the correct identity.
_OPPOSITE = {Choice.A.value: Choice.B.value, Choice.B.value: Choice.A.value}
_CACHE = VersionedCache(maxsize=128)


@dataclass(frozen=True)
class JudgeSummary:
    """One judge on one benchmark.

    Attributes
    ----------
    pairs : int
        Instances with an AB or a BA judgment.
    retained : int
        Pairs valid in both orders (the flip label is defined).
    flips, flip_rate, flip_rate_ci
        Flipped retained pairs, their fraction and its group-bootstrap 95% interval.
    accuracy_ab : float or None
        Fraction of referenced pairs whose AB choice is the reference (tie, invalid or missing
        count as wrong); ``None`` without reference labels.
    accuracy_both_orders : float or None
        JudgeBench's rule: +1 per order choosing the reference, -1 per order choosing the
        other response; a pair is correct when the sum is positive; correct / referenced pairs.
    agreement_flip, agreement_nonflip : float or None
        AB-choice agreement with the reference on retained flip / non-flip pairs.
    repeat_pairs, repeat_changed : int, int or None
        Pairs with both an AB and an AB-repeat judgment, and how many changed their choice
        (``None`` without repeats; greedy decoding should give 0).

    """

    judge: str
    reference: str
    pairs: int
    retained: int
    flips: int
    flip_rate: float | None
    flip_rate_ci: list[float] | None
    referenced: int
    accuracy_ab: float | None
    accuracy_both_orders: float | None
    agreement_flip: float | None
    agreement_nonflip: float | None
    repeat_pairs: int
    repeat_changed: int | None

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of ``appellate metrics --json`` (``judges`` entries)."""
        return asdict(self)


def _fraction(hits: int, total: int) -> float | None:
    return hits / total if total else None


def _summarise(
    name: str,
    by_instance: dict[int, dict[str, Verdict]],
    groups: dict[int, str],
    reference: dict[int, str],
    reference_name: str,
    resamples: int,
    seed: int,
) -> JudgeSummary:
    flips: dict[int, bool] = {}
    correct_ab = correct_both = referenced = 0
    agree = {True: [0, 0], False: [0, 0]}  # flip -> [agreeing, pairs]
    repeat_pairs = repeat_changed = 0
    for instance_id, per in by_instance.items():
        ab, ba = per.get(Order.AB.value), per.get(Order.BA.value)
        flip = flip_value(ab and ab.choice, ba and ba.choice)
        if flip is not None:
            flips[instance_id] = flip == "1"
        repeat = per.get(Order.AB_REPEAT.value)
        if ab is not None and repeat is not None:
            repeat_pairs += 1
            repeat_changed += ab.choice != repeat.choice
        ref = reference.get(instance_id)
        if ref not in _OPPOSITE:
            continue
        referenced += 1
        correct_ab += ab is not None and ab.choice == ref
        votes = sum(
            (j.choice == ref) - (j.choice == _OPPOSITE[ref]) for j in (ab, ba) if j is not None
        )
        correct_both += votes > 0
        if flip is not None and ab is not None:
            tally = agree[flip == "1"]
            tally[0] += ab.choice == ref
            tally[1] += 1
    retained = sorted(flips)
    flip_rate, flip_ci = None, None
    if retained:
        estimate = bootstrap_mean(
            [float(flips[i]) for i in retained],
            [groups[i] for i in retained],
            resamples=resamples,
            seed=seed,
        )
        flip_rate, flip_ci = estimate.value, estimate.ci
    return JudgeSummary(
        judge=name,
        reference=reference_name,
        pairs=sum(Order.AB.value in per or Order.BA.value in per for per in by_instance.values()),
        retained=len(retained),
        flips=sum(flips.values()),
        flip_rate=flip_rate,
        flip_rate_ci=flip_ci,
        referenced=referenced,
        accuracy_ab=_fraction(correct_ab, referenced),
        accuracy_both_orders=_fraction(correct_both, referenced),
        agreement_flip=_fraction(*agree[True]),
        agreement_nonflip=_fraction(*agree[False]),
        repeat_pairs=repeat_pairs,
        repeat_changed=repeat_changed if repeat_pairs else None,
    )


def judge_summaries(
    session: Session,
    benchmark: str,
    *,
    reference: str = "reference",
    judges: list[str] | None = None,
    resamples: int = 2000,
    seed: int = 0,
    cache: VersionedCache | None = _CACHE,
    labels: LabelMode = "original",
    k: int = 2,
) -> list[JudgeSummary]:
    """Summaries of every judge with both AB and BA judgments on the benchmark, by name.

    Reward models are left out: they score each response alone, so their orders say nothing
    about position (:func:`app.services.evidence.flips.is_two_order_judge`).

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark
        Benchmark name.
    reference
        Label set naming the correct response (``"A"``/``"B"``); accuracies are ``None`` on
        pairs without it.
    judges
        Restrict to these detector names (unknown names are simply absent).
    resamples, seed
        Group-bootstrap resamples (group = ``Instance.group_key``) and root seed of the
        flip-rate interval.
    cache
        Memo keyed on the benchmark's ``data_version``; ``None`` disables it.
    labels, k
        Check against the original or the resolved reference (see
        :func:`app.services.evidence.labelled_items.load_labelled`).

    Returns
    -------
    list of JudgeSummary

    Raises
    ------
    NotFound
        Unknown benchmark.
    InvalidInput
        Bad resamples, seed, labels or k.

    """
    query = MetricsQuery(benchmark, labels=labels, k=k, resamples=resamples, seed=seed)
    bench = get_benchmark(session, benchmark)
    return _summaries(session, bench, query, reference, judges, cache)


def judge_summaries_of(
    session: Session, data: MetricsData, reference: str = "reference"
) -> list[JudgeSummary]:
    """:func:`judge_summaries` of a loaded metrics request (its benchmark, labels, resamples).

    The summaries count every judged pair, labelled or not, against the ``reference`` label
    set, so they read the judgments (and that label set) rather than the request's items.
    """
    return _summaries(session, data.benchmark, data.query, reference, None, _CACHE)


def _summaries(
    session: Session,
    bench: Benchmark,
    query: MetricsQuery,
    reference: str,
    judges: list[str] | None,
    cache: VersionedCache | None,
) -> list[JudgeSummary]:
    labels, k, resamples, seed = query.labels, query.k, query.resamples, query.seed
    key = (
        "judge-summaries",
        *data_key(session, bench),
        reference,
        *label_key(labels, k),
        None if judges is None else tuple(judges),
        resamples,
        seed,
    )

    def compute() -> list[JudgeSummary]:
        orders = judge_orders(session, bench.id)
        if not orders:  # no judge: spare reading every instance's group and label
            return []
        detectors = {
            i: (name, kind)
            for i, name, kind in session.execute(
                select(Detector.id, Detector.name, Detector.kind).where(
                    Detector.id.in_(list(orders))
                )
            )
        }
        value = current_label_subquery(reference) if labels == "original" else null()
        q = select(Instance.id, Instance.group_key, value).where(Instance.benchmark_id == bench.id)
        groups: dict[int, str] = {}
        values: dict[int, str] = {}
        for instance_id, group, current in session.execute(q):
            groups[instance_id] = group
            if current is not None:
                values[instance_id] = current
        if labels == "resolved":
            values = resolved_values(session, bench.id, reference, k=k)
        out = []
        for detector_id, by_instance in orders.items():
            name, kind = detectors[detector_id]
            seen = {o for per in by_instance.values() for o in per}
            if not is_two_order_judge(kind, seen):
                continue
            if judges is not None and name not in judges:
                continue
            out.append(_summarise(name, by_instance, groups, values, reference, resamples, seed))
        return sorted(out, key=lambda s: s.judge)

    return compute() if cache is None else cache.get_or_compute(key, compute)
