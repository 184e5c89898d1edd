"""Typed body of ``GET /api/benchmarks/{name}/metrics`` (the dict of ``appellate metrics --json``).

The row model is built from the metric registry, so ``/openapi.json`` documents every metric
column (``name`` and, with an interval, ``name_ci``) without an edit here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, create_model

from app.services.evidence.labelled_items import LabelMode
from app.services.metrics.judge_summary import JudgeSummary
from app.services.metrics.metric_matrix import MATRIX_METRICS
from app.stats.registry import ANSWER_METRICS

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
    for metric in (*MATRIX_METRICS, *ANSWER_METRICS):
        # A row has either the matrix's metrics (scores) or the answer metrics (models).
        fields[metric.name] = (
            float | None,
            Field(None, description=f"{metric.title}; null when undefined or not applicable."),
        )
        if metric.interval:
            fields[f"{metric.name}_ci"] = (
                Interval,
                Field(
                    None, description=f"95% group-bootstrap percentile interval of {metric.title}."
                ),
            )
            fields[f"{metric.name}_ci_reason"] = (
                str | None,
                Field(
                    None,
                    description="Why the interval is null although the value is not: too few "
                    "groups for an interval (fewer than the server's min_interval_groups).",
                ),
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
    difference_ci_reason: str | None = Field(
        default=None, description="Why difference_ci is null: too few groups for an interval."
    )
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
    brier_ci_reason: str | None = Field(
        default=None, description="Why brier_ci is null: too few groups for an interval."
    )


class Agreement(BaseModel):
    """Two models' answers on the items both answered."""

    first: str
    second: str
    n: int
    agreement: float | None = Field(description="Share of items with the same answer.")
    kappa: float | None = Field(description="Cohen's kappa (agreement beyond chance).")


class Confusion(BaseModel):
    """A model's answers by the label's option: ``counts[i][j]`` items of label i answered j."""

    labels: list[str]
    answers: list[str]
    counts: list[list[int]]


class MetricsReportModel(BaseModel):
    """The metric matrix, judge summaries and paired comparisons of one label set.

    On a choice or answer benchmark against ``reference`` the report is about the models'
    answers (``kind`` = ``answers``): rows hold answer metrics, ``positive`` is null, and
    ``agreement`` and ``confusion`` are added. Keys a report does not have are left out.
    """

    kind: str | None = None
    benchmark: str
    label: str
    labels: LabelMode
    k: int
    positive: str | None
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
    agreement: list[Agreement] | None = None
    confusion: dict[str, Confusion] | None = None
