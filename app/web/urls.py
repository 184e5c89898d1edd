"""Paths of the pages, built in one place so names and external ids are always encoded."""

from __future__ import annotations

from urllib.parse import quote

from app.services.instance_filter import InstanceFilter
from app.web.filters import query_string


def path_segment(value: str) -> str:
    """``value`` encoded as one path segment (slashes included)."""
    # External ids may hold "/", "?", "#", "%" or "|": encode everything but unreserved
    # characters; the router decodes the path again before matching `{external_id:path}`.
    return quote(value, safe="")


def benchmark_url(name: str, flt: InstanceFilter | None = None, page: int | None = None) -> str:
    """Path (with query) of the benchmark page showing ``flt`` at ``page``."""
    return f"/benchmarks/{path_segment(name)}" + query_string(flt or InstanceFilter(), page=page)


def instance_url(
    name: str,
    external_id: str,
    flt: InstanceFilter | None = None,
    page: int | None = None,
) -> str:
    """Path of an instance page; the filter and page travel along for previous/next and back."""
    return f"/benchmarks/{path_segment(name)}/instances/{path_segment(external_id)}" + query_string(
        flt or InstanceFilter(), page=page
    )


def api_instances_url(name: str, flt: InstanceFilter | None = None) -> str:
    """Path of the JSON view of the same table."""
    return f"/api/benchmarks/{path_segment(name)}/instances" + query_string(flt or InstanceFilter())
