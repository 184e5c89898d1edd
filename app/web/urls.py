"""Paths of the pages, built in one place so names and external ids are always encoded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlencode

from app.services.jobs.kind import JobLink
from app.services.table.instance_filter import InstanceFilter
from app.services.table.instance_sort import DEFAULT_SORT
from app.web.filters import query_string


def path_segment(value: str) -> str:
    """``value`` encoded as one path segment (slashes included)."""
    # External ids may hold "/", "?", "#", "%" or "|": encode everything but unreserved
    # characters; the router decodes the path again before matching `{external_id:path}`.
    return quote(value, safe="")


def benchmark_url(
    name: str,
    flt: InstanceFilter | None = None,
    page: int | None = None,
    sort: str | None = None,
    cols: Sequence[str] | None = None,
) -> str:
    """Path (with query) of the benchmark page showing ``flt`` at ``page`` in order ``sort``.

    ``cols`` are the ``cols`` values of the chosen columns
    (:meth:`app.web.cells.ColumnChoice.param`); ``None``: every column.
    """
    return f"/benchmarks/{path_segment(name)}" + query_string(
        flt or InstanceFilter(), page=page, sort=_sort_param(sort), cols=cols
    )


def _sort_param(sort: str | None) -> str | None:
    # The default order stays out of URLs, so equal views keep equal URLs.
    return None if not sort or sort == DEFAULT_SORT else sort


def instance_url(
    name: str,
    external_id: str,
    flt: InstanceFilter | None = None,
    page: int | None = None,
    sort: str | None = None,
    cols: Sequence[str] | None = None,
) -> str:
    """Path of an instance page; filter, page, sort and chosen columns travel along.

    They serve previous/next and the way back to the same table view.
    """
    return f"/benchmarks/{path_segment(name)}/instances/{path_segment(external_id)}" + query_string(
        flt or InstanceFilter(), page=page, sort=_sort_param(sort), cols=cols
    )


def api_instances_url(name: str, flt: InstanceFilter | None = None, sort: str | None = None) -> str:
    """Path of the JSON view of the same table."""
    return f"/api/benchmarks/{path_segment(name)}/instances" + query_string(
        flt or InstanceFilter(), sort=_sort_param(sort)
    )


def with_query(path: str, params: dict[str, Any]) -> str:
    """``path`` with ``params`` as its query (``None``, empty values and empty lists left out)."""
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        if value is None or value == "" or value == []:
            continue
        for v in value if isinstance(value, list) else [value]:
            pairs.append((key, str(v)))
    return path + ("?" + urlencode(pairs) if pairs else "")


def metrics_url(name: str, **params: Any) -> str:
    """Path of the metrics page with ``params``."""
    return with_query(f"/benchmarks/{path_segment(name)}/metrics", params)


def judge_form_url(name: str) -> str:
    """Path of the form that queues a judge job on a pairwise benchmark."""
    return f"/benchmarks/{path_segment(name)}/judge"


def disagreements_url(name: str, csv_export: bool = False, **params: Any) -> str:
    """Path of the disagreements page (or its CSV export) with ``params``."""
    suffix = "disagreements.csv" if csv_export else "disagreements"
    return with_query(f"/benchmarks/{path_segment(name)}/{suffix}", params)


PROBES_URL = "/probes"


def job_link_url(link: JobLink) -> str:
    """The URL of a job's output link (:meth:`app.services.jobs.kind.JobParams.links`)."""
    if link.page == "queue" and link.queue_id is not None:
        return f"/queues/{link.queue_id}"
    if link.page == "probes" or link.benchmark is None:
        return PROBES_URL
    if link.page == "metrics":
        return metrics_url(link.benchmark, **_grouped(link.query))
    return benchmark_url(link.benchmark, link.table)


def _grouped(pairs: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """Query pairs as :func:`with_query` takes them: a repeated key becomes a list."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        out.setdefault(key, []).append(value)
    return {k: v[0] if len(v) == 1 else v for k, v in out.items()}
