"""Query parameters shared by the benchmark's metric and disagreement pages and their APIs."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from app.services.facets import BenchmarkFacets
from app.web.filters import Blank

LabelParam = Annotated[str | None, Blank, Query(description="Label set; default `reference`.")]
DetectorParam = Annotated[
    list[str] | None, Query(description="Detector name (repeatable); default all scored.")
]


def default_label(facets: BenchmarkFacets, label: str | None) -> str:
    """``label``, else ``reference`` when the benchmark has it, else its first label set."""
    if label:
        return label
    names = [ls.name for ls in facets.label_sets]
    return "reference" if "reference" in names or not names else names[0]


def non_blank(rows: list[str] | None) -> list[str]:
    """The repeated values of a parameter that are not blank (forms send empty selects)."""
    return [r for r in (rows or []) if r.strip()]
