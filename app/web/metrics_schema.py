"""Typed body of ``GET /api/benchmarks/{name}/metrics`` (the dict of ``appellate metrics --json``).

The row model is built from the metric registry, so ``/openapi.json`` documents every metric
column (``name`` and, with an interval, ``name_ci``) without an edit here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, create_model

from app.services.judge_summary import JudgeSummary
from app.services.labelled_items import LabelMode
from app.services.metric_matrix import MATRIX_METRICS

__all__ = ["MetricRowModel", "MetricsReportModel"]

Interval = list[float] | None


def _row_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {
        "detector": (str, Field(description="Detector name.")),
        "slice": (
            str | None,
            Field(description="Slice value; null for all items, `(macro-average)` for the mean."),
        ),
        "n": (int, Field(description="Labelled items the detector scored.")),
    }
    for metric in MATRIX_METRICS:
        fields[metric.name] = (
            float | None,
            Field(description=f"{metric.title}; null when undefined or not applicable."),
        )
        if metric.interval:
            fields[f"{metric.name}_ci"] = (
                Interval,
                Field(description=f"95% group-bootstrap percentile interval of {metric.title}."),
            )
    return fields


MetricRowModel: type[BaseModel] = create_model(
    "MetricRow", __doc__="One detector on all items, one slice, or the macro.", **_row_fields()
)


class PairedDifference(BaseModel):
    """One metric of a paired comparison: first minus second on shared resamples."""

    metric: str
    p1_value: float | None
    p2_value: float | None
    difference: float | None
    difference_ci: Interval
    p1_better_fraction: float | None = Field(
        description="Share of valid resamples where the first detector is strictly better."
    )
    higher_is_better: bool
    valid_resamples: int
    resamples: int
    level: float


class Comparison(BaseModel):
    """A probe against a baseline on the items both scored."""

    first: str
    second: str
    n: int
    metrics: list[PairedDifference]


class ConstantPredictor(BaseModel):
    """The Brier score of always predicting a frozen probe's source prevalence."""

    probe: str
    source_prevalence: float
    n: int
    brier: float | None
    brier_ci: Interval


class MetricsReportModel(BaseModel):
    """The metric matrix, judge summaries and paired comparisons of one label set."""

    benchmark: str
    label: str
    labels: LabelMode
    k: int
    positive: str
    negative: str | None
    target_rule: str
    slice_field: str | None
    resamples: int
    seed: int
    data_version: int
    rows: list[MetricRowModel]  # type: ignore[valid-type]
    judges: list[JudgeSummary]
    comparisons: list[Comparison]
    constant_predictors: list[ConstantPredictor]
