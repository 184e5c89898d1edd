"""The ``compute_metrics`` job: compute one metrics request and store it for every page.

A metrics page leaves a big benchmark's missing result to this job (see
:mod:`app.services.jobs.compute_metrics`) and shows progress meanwhile: one unit per detector's
rows, one for the judges and comparisons, one per detector's plots.
"""

from __future__ import annotations

from typing import Any

from app.services.jobs.compute_metrics import ComputeMetricsParams
from app.services.metrics.metric_results import compute_unless_stored, save_result
from app.services.metrics.svg_plots import metrics_figures
from workers.runner import JobContext, handles


@handles(ComputeMetricsParams)
def run_compute_metrics(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``compute_metrics`` jobs: one read that computes, one short write that stores.

    A result already stored for the current data version (another job, a page, the CLI) is
    not computed again.
    """
    query = ComputeMetricsParams.from_dict(ctx.params).metrics_query()

    result = ctx.read(
        lambda s: compute_unless_stored(s, query, draw=metrics_figures, progress=ctx.progress)
    )
    if result is None:
        return {"benchmark": query.benchmark, "computed": False}
    ctx.commit(lambda session: save_result(session, result))
    return {
        "benchmark": query.benchmark,
        "computed": True,
        "data_version": result.data_version,
        "seconds": round(result.seconds, 3),
    }
