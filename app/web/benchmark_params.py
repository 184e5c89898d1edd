"""Query parameters shared by the benchmark's metric and disagreement pages and their APIs."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from app.services.evidence.labels import default_label_set
from app.services.table.facets import BenchmarkFacets
from app.web.filters import Blank

LabelParam = Annotated[
    str | None,
    Blank,
    Query(description="Label set; default `reference`, else the benchmark's first label set."),
]
DetectorParam = Annotated[
    list[str] | None, Query(description="Detector name (repeatable); default all scored.")
]


def default_label(facets: BenchmarkFacets, label: str | None) -> str:
    """``label``, else the benchmark's default label set (the domain's one rule)."""
    return default_label_set([ls.name for ls in facets.label_sets], label)


def non_blank(rows: list[str] | None) -> list[str]:
    """The repeated values of a parameter that are not blank (forms send empty selects)."""
    return [r for r in (rows or []) if r.strip()]
