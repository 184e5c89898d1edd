"""Models' answers against a multi-class label set: accuracy, macro-F1, agreement, confusion.

On choice and answer benchmarks the ``reference`` label set names the correct option (or answer
text), and every detector with predictions is a model answering the items. The report has the
shape of the metric matrix's (rows per model, per slice and the macro-average, with
group-bootstrap intervals; paired differences), plus the models' pairwise agreement and each
model's confusion matrix.
"""

from __future__ import annotations

from collections.abc import Hashable
from itertools import combinations
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.orm import Session

from app.services.evidence.answer_matrix import (
    ANSWER_KINDS,
    ANSWER_LABEL,
    AnswerMatrix,
    load_answers,
)
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labelled_items import data_key, label_key
from app.services.metrics.metric_matrix import Cell, MetricRow, macro_row, slice_seed
from app.services.metrics.metrics_query import METRICS_CACHE, MetricsQuery
from app.stats.agreement import cohens_kappa
from app.stats.bootstrap import group_bootstrap_answers
from app.stats.label_errors import NO_ANSWER, OFF_OPTIONS
from app.stats.registry import ANSWER_METRICS, Metric, Need
from app.stats.summary import difference_rows
from app.tables import Benchmark

__all__ = ["ANSWERS_REPORT", "ANSWER_LABEL", "answer_report", "compares_answers"]

ANSWERS_REPORT = "answers"
"""The ``kind`` of an answer report (a report of scores has no ``kind``)."""
OTHER = "other"
"""The confusion-matrix column of answers that name no option."""


def compares_answers(bench: Benchmark, label: str) -> bool:
    """Whether a metrics request on ``bench`` against ``label`` is about models' answers."""
    return bench.kind in ANSWER_KINDS and label == ANSWER_LABEL


def _coded(matrix: AnswerMatrix) -> tuple[NDArray[np.intp], NDArray[np.intp], int]:
    """Labels (n,), answers (n, m) and K, coded as :mod:`app.stats.label_errors` codes them.

    Choice items: option indices (labels -1 where unlabelled; answers ``NO_ANSWER`` or
    ``OFF_OPTIONS``). Answer items: one class, a right answer 0 and a wrong one ``OFF_OPTIONS``.
    """
    if matrix.is_choice:
        return matrix.label_codes(), matrix.answer_codes(), matrix.n_classes
    correct = matrix.correct()
    labels = np.array([0 if v is not None else -1 for v in matrix.labels], dtype=np.intp)
    answers = np.where(np.isnan(correct), NO_ANSWER, np.where(correct == 1.0, 0, OFF_OPTIONS))
    return labels, answers.astype(np.intp), 1


def _answered(labels: NDArray[np.intp], *answers: NDArray[np.intp]) -> NDArray[np.bool_]:
    """Items with a label that every one of ``answers`` answered."""
    keep = labels >= 0
    for a in answers:
        keep &= a != NO_ANSWER
    return keep


def _metrics(n_classes: int) -> tuple[Metric, ...]:
    return tuple(m for m in ANSWER_METRICS if n_classes >= 2 or Need.CLASSES not in m.needs)


def _cell(
    detector: str,
    slice_name: str | None,
    kind: str,
    labels: NDArray[np.intp],
    answers: NDArray[np.intp],
    groups: NDArray[Any],
    n_classes: int,
    query: MetricsQuery,
    seed: int,
) -> Cell:
    """One model's answer metrics on some items, with the replicates the macro-average needs."""
    metrics = _metrics(n_classes)
    values: dict[str, float | None] = dict.fromkeys(m.name for m in metrics)
    intervals: dict[str, list[float] | None] = dict.fromkeys(m.name for m in metrics)
    if labels.size == 0:
        return Cell(MetricRow(detector, slice_name, kind, 0, 0, values, intervals, {}, metrics), {})
    result = group_bootstrap_answers(
        labels,
        [answers],
        groups,
        n_classes,
        metrics=[m.name for m in metrics],
        resamples=query.resamples,
        seed=seed,
    )
    valid = {}
    for metric in metrics:
        estimate = result.estimate(metric.name)
        values[metric.name], intervals[metric.name] = estimate.value, estimate.ci
        valid[metric.name] = estimate.valid
    n, n_groups = int(labels.size), result.n_groups
    row = MetricRow(detector, slice_name, kind, n, n_groups, values, intervals, valid, metrics)
    return Cell(row, {m.name: result.replicates[m.name][0] for m in metrics})


def _model_rows(matrix: AnswerMatrix, j: int, query: MetricsQuery) -> list[MetricRow]:
    labels, answers, k = _coded(matrix)
    keep = _answered(labels, answers[:, j])
    groups = np.asarray(matrix.groups, dtype=object)
    name = matrix.models[j]
    every = _cell(
        name, None, "all", labels[keep], answers[keep, j], groups[keep], k, query, query.seed
    )
    rows = [every.row]
    if matrix.slices is None:
        return rows
    slices = np.asarray(matrix.slices, dtype=object)
    cells = []
    for index, value in enumerate(sorted(set(matrix.slices))):
        part = keep & (slices == value)
        seed = slice_seed(query.seed, index)
        cell = _cell(
            name, value, "slice", labels[part], answers[part, j], groups[part], k, query, seed
        )
        cells.append(cell)
        rows.append(cell.row)
    rows.append(macro_row(name, cells, _metrics(k)))
    return rows


def _comparisons(
    matrix: AnswerMatrix, rows: list[MetricRow], query: MetricsQuery
) -> list[dict[str, Any]]:
    """Each model against the most accurate one, on the items both answered."""
    rated = {
        r.detector: r.values["answer_accuracy"]
        for r in rows
        if r.slice is None and r.values.get("answer_accuracy") is not None
    }
    if len(rated) < 2:
        return []
    best = max(sorted(rated), key=lambda m: rated[m])
    labels, answers, k = _coded(matrix)
    groups = np.asarray(matrix.groups, dtype=object)
    b = matrix.models.index(best)
    names = [m.name for m in _metrics(k)]
    out = []
    for j, name in enumerate(matrix.models):
        if name == best or name not in rated:
            continue
        keep = _answered(labels, answers[:, j], answers[:, b])
        result = group_bootstrap_answers(
            labels[keep],
            [answers[keep, j], answers[keep, b]],
            groups[keep],
            k,
            metrics=names,
            resamples=query.resamples,
            seed=query.seed,
        )
        out.append(
            {
                "first": name,
                "second": best,
                "n": int(keep.sum()),
                "metrics": difference_rows(result, names),
            }
        )
    return out


def _agreement(matrix: AnswerMatrix) -> list[dict[str, Any]]:
    """Every pair of models: how often they give the same answer, and Cohen's kappa."""
    out = []
    for a, b in combinations(range(len(matrix.models)), 2):
        both = [
            (row[a], row[b]) for row in matrix.answers if row[a] is not None and row[b] is not None
        ]
        first = [x for x, _ in both]
        second = [y for _, y in both]
        out.append(
            {
                "first": matrix.models[a],
                "second": matrix.models[b],
                "n": len(both),
                "agreement": float(np.mean([x == y for x, y in both])) if both else None,
                "kappa": cohens_kappa(first, second) if both else None,
            }
        )
    return out


def _confusion(matrix: AnswerMatrix) -> dict[str, dict[str, Any]]:
    """Per model: counts of (label option, answer option or other) on choice items."""
    if not matrix.is_choice:
        return {}
    labels, answers, k = _coded(matrix)
    classes = [chr(ord("A") + i) for i in range(k)]
    out = {}
    for j, name in enumerate(matrix.models):
        counts = np.zeros((k, k + 1), dtype=np.int64)
        for label, answer in zip(labels, answers[:, j], strict=True):
            if label >= 0 and answer != NO_ANSWER:
                counts[label, answer if answer >= 0 else k] += 1
        out[name] = {"labels": classes, "answers": [*classes, OTHER], "counts": counts.tolist()}
    return out


def answer_report(session: Session, query: MetricsQuery) -> dict[str, Any]:
    """The answer report of ``query`` (a choice or answer benchmark against ``reference``).

    Rows: per model (``query.detectors`` or every model with answers), its answer metrics
    (:data:`app.stats.registry.ANSWER_METRICS`) over the items it answered, with
    group-bootstrap intervals; with a slice field, per slice and their macro-average.
    ``comparisons`` pair each model with the most accurate one; ``agreement`` lists every pair
    of models; ``confusion`` gives each model's counts on choice items.

    Returns
    -------
    dict
        The keys of :func:`app.services.metrics.report.report_of`, plus ``agreement`` and
        ``confusion``; ``positive``, ``negative`` are null and ``target_rule`` says how answers
        are checked.

    """
    bench = get_benchmark(session, query.benchmark)
    matrix = load_answers(
        session,
        bench,
        label=query.label,
        labels=query.labels,
        k=query.k,
        models=query.detectors,
        slice_field=query.slice_field,
    )
    key: Hashable = (
        "answer-report",
        *data_key(session, bench),
        query.label,
        *label_key(query.labels, query.k),
        tuple(matrix.models),
        query.slice_field,
        query.resamples,
        query.seed,
    )

    def compute() -> dict[str, Any]:
        rows = [r for j in range(len(matrix.models)) for r in _model_rows(matrix, j, query)]
        rule = (
            "answer letter equals the label"
            if matrix.is_choice
            else (f"answers graded against the label ({bench.details.get('grader', 'normalized')})")
        )
        return {
            "kind": ANSWERS_REPORT,
            "benchmark": query.benchmark,
            "label": query.label,
            "labels": query.labels,
            "k": query.k,
            "positive": None,
            "negative": None,
            "target_rule": rule,
            "slice_field": query.slice_field,
            "resamples": query.resamples,
            "seed": query.seed,
            "data_version": bench.data_version,
            "rows": [row.as_dict() for row in rows],
            "judges": [],
            "comparisons": _comparisons(matrix, rows, query),
            "constant_predictors": [],
            "agreement": _agreement(matrix),
            "confusion": _confusion(matrix),
        }

    return METRICS_CACHE.get_or_compute(key, compute)
