"""The defect report of a benchmark: what review found, what it changed and what that does.

Counts defect tags, lists every relabelled item with who decided it and why, counts reviewed
and changed items per label set, and compares each detector's metrics on the original and
the resolved labels of every binary label set that review changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.attributes import attributes
from app.errors import InvalidInput, NotFound
from app.services.evidence.answer_matrix import ANSWER_KINDS, ANSWER_LABEL
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labelled_items import scored_detectors
from app.services.evidence.labels import label_names as benchmark_label_names
from app.services.evidence.resolution import (
    ChangeRow,
    Event,
    Resolution,
    change_rows,
    check_k,
    fold,
    latest_events,
)
from app.services.metrics.answer_changes import answer_comparison
from app.services.metrics.metric_matrix import MATRIX_METRICS, MetricRow
from app.services.metrics.metrics_compare import compare_metrics
from app.services.metrics.metrics_query import MetricsData, MetricsQuery, load_metrics_data
from app.services.review.queues import benchmark_tags
from app.stats import _validate
from app.stats.bootstrap import Difference
from app.stats.registry import Need
from app.stats.relabel import relabel_differences
from app.tables import Benchmark, Detector, Instance

__all__ = ["defect_report"]

# The rows of the metrics comparison: the matrix's metrics, in its order.
REPORT_METRICS: tuple[str, ...] = tuple(m.name for m in MATRIX_METRICS)


def defect_report(
    session: Session,
    benchmark_name: str,
    *,
    k: int = 2,
    label: str | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Tag counts, relabelled items, per-label-set counts and metrics before and after review.

    Parameters
    ----------
    session : Session
        An open session; nothing is written.
    benchmark_name : str
        The benchmark.
    k : int
        Agreeing voters needed for votes to override the original (at least 1).
    label : str, optional
        Report on this label set only (default: every label set of the benchmark).
    resamples : int
        Group-bootstrap resamples B of each metric interval (0: point values only).
    seed : int
        Bootstrap root seed, shared by the original and the resolved side.

    Returns
    -------
    dict
        JSON-ready:

        - ``benchmark``, ``k``, ``label``, ``resamples``, ``seed``;
        - ``tags``: one dict per defect tag (the tags the benchmark's queues offer, see
          :func:`app.services.review.queues.benchmark_tags`, in their order, then any
          other tag found) with ``changed`` (how many deciding events of changed items carry
          it) and ``standing`` (how many standing votes and latest adjudications carry it);
        - ``changes``: the changelog rows (see
          :class:`~app.services.evidence.resolution.ChangeRow`), lists as lists, ``decided_at`` in
          ISO 8601, sorted by label set then external id;
        - ``label_sets``: per label set ``instances`` (with a value or an event of it),
          ``reviewed`` (with a standing vote or an adjudication), ``changed``,
          ``by_adjudication`` and ``by_votes``;
        - ``metrics``: per label set, ``note`` (why it was not compared) or ``comparison``:
          ``positive``, ``negative``, ``changed``, ``relabelled``, ``unlabelled``,
          ``labelled`` and ``detectors``, each with ``detector``, ``changed`` (items it
          scored that review changed), ``n_original``, ``n_resolved`` and ``metrics``: one
          dict per metric defined on either side with ``metric``, ``original``,
          ``original_ci``, ``resolved``, ``resolved_ci``, ``difference`` (resolved minus
          original; ``None`` unless both are defined) and ``difference_ci`` (its paired
          group-bootstrap interval: both sides draw the same groups, see
          :func:`app.stats.relabel.relabel_differences`; ``None`` for metrics of strata).

    Raises
    ------
    NotFound
        Unknown benchmark, or a ``label`` the benchmark does not have.
    InvalidInput
        ``k`` below 1, or invalid ``resamples`` or ``seed``.

    """
    check_k(k)
    try:
        resamples = _validate.resample_count(resamples)
        seed = _validate.seed_value(seed)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    bench = get_benchmark(session, benchmark_name)
    names = benchmark_label_names(session, bench.id)
    if label is not None:
        if label not in names:
            raise NotFound(f"benchmark {bench.name!r} has no label set {label!r}")
        names = [label]

    in_benchmark = select(Instance.id).where(Instance.benchmark_id == bench.id)
    changed_tags: Counter[str] = Counter()
    standing_tags: Counter[str] = Counter()
    changes: list[ChangeRow] = []
    label_sets = []
    # One query per label set, as in resolution.changelog: what is held at once is bounded
    # by one set's latest events, and the same fold gives counts, tags and changelog rows.
    for name in names:
        folded = fold(latest_events(session, in_benchmark, [name]), k)
        resolutions = [res for _ext, res in folded.values()]
        for res in resolutions:
            standing_tags.update(_tags(_standing(res)))
            if res.changed:
                changed_tags.update(_tags(res.deciding))
        changes += change_rows(folded)
        label_sets.append(_label_set_counts(name, resolutions))
    changes.sort(key=lambda c: (c.label, c.external_id))

    has_scores = bool(scored_detectors(session, bench))
    metrics = [
        _metrics_entry(session, bench, counts, has_scores, k=k, resamples=resamples, seed=seed)
        for counts in label_sets
    ]
    return {
        "benchmark": bench.name,
        "k": k,
        "label": label,
        "resamples": resamples,
        "seed": seed,
        "tags": _tag_table(benchmark_tags(session, bench), changed_tags, standing_tags),
        "changes": [_change_dict(c) for c in changes],
        "label_sets": label_sets,
        "metrics": metrics,
    }


def _standing(res: Resolution) -> list[Event]:
    """Each author's latest vote unless withdrawn, and the latest adjudication."""
    events = [e for e in res.vote_events if e.value is not None]
    if res.adjudication is not None:
        # A null adjudication ("no label") is a decision too, and may carry tags.
        events.append(res.adjudication)
    return events


def _tags(events: Iterable[Event]) -> list[str]:
    # A tag counts once per event even if an importer repeated it.
    return [tag for e in events for tag in dict.fromkeys(e.tags)]


def _tag_table(
    vocabulary: Sequence[str], changed: Counter[str], standing: Counter[str]
) -> list[dict[str, Any]]:
    # The benchmark's queue vocabulary always shows (zeros included); other tags (imported,
    # or offered by no queue any more) follow, so none is silently dropped.
    others = sorted((set(changed) | set(standing)) - set(vocabulary))
    return [
        {"tag": tag, "changed": changed[tag], "standing": standing[tag]}
        for tag in (*vocabulary, *others)
    ]


def _label_set_counts(name: str, resolutions: Sequence[Resolution]) -> dict[str, Any]:
    changed = [r for r in resolutions if r.changed]
    return {
        "label": name,
        "instances": len(resolutions),
        "reviewed": sum(bool(_standing(r)) for r in resolutions),
        "changed": len(changed),
        "by_adjudication": sum(r.rule == "adjudication" for r in changed),
        "by_votes": sum(r.rule == "unanimous-votes" for r in changed),
    }


def _change_dict(change: ChangeRow) -> dict[str, Any]:
    return {
        **attributes(change, ("external_id", "label", "original", "resolved", "rule")),
        "authors": list(change.authors),
        "reasons": list(change.reasons),
        "tags": list(change.tags),
        "decided_at": change.decided_at.isoformat() if change.decided_at is not None else None,
    }


def _metrics_entry(
    session: Session,
    bench: Benchmark,
    counts: dict[str, Any],
    has_scores: bool,
    *,
    k: int,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    name = counts["label"]
    entry: dict[str, Any] = {"label": name, "note": None, "comparison": None, "answers": None}
    if not counts["changed"]:
        entry["note"] = "review changed no label of this set: the metrics are the original ones"
        return entry
    if bench.kind in ANSWER_KINDS and name == ANSWER_LABEL:
        # A choice or answer benchmark's reference: the models' answer metrics on both sides.
        answers = answer_comparison(session, bench, name, k=k, resamples=resamples, seed=seed)
        entry["answers"] = answers.as_dict()
        return entry
    if not has_scores:
        entry["note"] = "no detector has scores on this benchmark"
        return entry
    try:
        comparison = compare_metrics(session, bench.name, name, k=k, resamples=resamples, seed=seed)
    except (InvalidInput, NotFound) as exc:
        # k, resamples and seed were checked above, so what is left is the label set itself:
        # not binary before or after review, or no resolved value at all.
        entry["note"] = f"not compared: {exc.message}"
        return entry
    query = MetricsQuery(bench.name, name, k=k, resamples=resamples, seed=seed)
    sides = (
        load_metrics_data(session, query),
        load_metrics_data(session, replace(query, labels="resolved")),
    )
    detectors = {d.name: d for d in sides[0].detectors}
    entry["comparison"] = {
        "positive": comparison.positive,
        "negative": comparison.negative,
        "changed": comparison.changed,
        "relabelled": comparison.relabelled,
        "unlabelled": comparison.unlabelled,
        "labelled": comparison.labelled,
        "detectors": [
            _detector_dict(
                d.detector,
                d.changed,
                _all_items(d.original),
                _all_items(d.resolved),
                lambda wanted, det=detectors[d.detector]: _differences(*sides, det, wanted),
            )
            for d in comparison.detectors
        ],
    }
    return entry


def _all_items(rows: Sequence[MetricRow]) -> MetricRow | None:
    # Without a slice field each side has one row, over all items the detector scored.
    return next((r for r in rows if r.slice is None), None)


def _differences(
    original: MetricsData, resolved: MetricsData, detector: Detector, metrics: list[str]
) -> dict[str, Difference]:
    """Resolved-minus-original ``metrics`` of ``detector`` with paired group-bootstrap CIs.

    The items are those the detector scored with a label on either side; both sides draw the
    same groups (:func:`app.stats.relabel.relabel_differences`), seeded as the matrix.
    """
    ids = np.union1d(original.items.instance_ids, resolved.items.instance_ids)
    labels = np.full((2, ids.size), np.nan)
    scores = np.full(ids.size, np.nan)
    groups = np.empty(ids.size, dtype=object)
    for side, data in enumerate((original, resolved)):
        at = np.searchsorted(ids, data.items.instance_ids)
        labels[side, at] = data.items.y
        scores[at] = data.scores(detector)
        groups[at] = data.items.groups
    keep = ~np.isnan(scores)
    if not metrics or not keep.any() or np.isnan(labels[:, keep]).all(axis=1).any():
        return {}
    return relabel_differences(
        labels[0, keep],
        labels[1, keep],
        scores[keep],
        groups[keep],
        metrics=metrics,
        resamples=original.query.resamples,
        seed=original.query.seed,
    )


def _detector_dict(
    detector: str,
    changed: int,
    before: MetricRow | None,
    after: MetricRow | None,
    differences: Callable[[list[str]], dict[str, Difference]],
) -> dict[str, Any]:
    metrics = []
    # Paired intervals for the interval metrics defined on both sides (not those of strata).
    paired = [
        m.name
        for m in MATRIX_METRICS
        if m.interval
        and Need.STRATA not in m.needs
        and before is not None
        and after is not None
        and before.values.get(m.name) is not None
        and after.values.get(m.name) is not None
    ]
    deltas = differences(paired) if paired else {}
    for metric in REPORT_METRICS:
        old = before.values.get(metric) if before is not None else None
        new = after.values.get(metric) if after is not None else None
        if old is None and new is None:
            continue  # not applicable here, e.g. choice-matched AUROC outside flip label sets
        delta = deltas.get(metric)
        metrics.append(
            {
                "metric": metric,
                "original": old,
                "original_ci": before.intervals.get(metric) if before is not None else None,
                "resolved": new,
                "resolved_ci": after.intervals.get(metric) if after is not None else None,
                "difference": new - old if old is not None and new is not None else None,
                "difference_ci": delta.estimate.ci if delta is not None else None,
                # Why an interval above is None although its value is not: too few groups.
                "original_ci_reason": before.interval_reason if before is not None else None,
                "resolved_ci_reason": after.interval_reason if after is not None else None,
                "difference_ci_reason": delta.estimate.reason if delta is not None else None,
            }
        )
    return {
        "detector": detector,
        "changed": changed,
        "n_original": before.n if before is not None else 0,
        "n_resolved": after.n if after is not None else 0,
        "metrics": metrics,
    }
