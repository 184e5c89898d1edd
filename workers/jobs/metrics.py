"""The ``compute_metrics`` job: compute one metrics request and store it for every page.

A metrics page leaves a big benchmark's missing result to this job (see
:mod:`app.services.jobs.compute_metrics`) and shows progress meanwhile: one unit per detector's
rows, one for the judges and comparisons, one per detector's plots.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.services.evidence.benchmarks import get_benchmark
from app.services.jobs.compute_metrics import ComputeMetricsParams
from app.services.metrics.metric_results import (
    MetricsResult,
    compute_result,
    save_result,
    stored_result,
)
from app.services.metrics.svg_plots import metrics_figures
from workers.runner import JobContext, handles


@handles(ComputeMetricsParams)
def run_compute_metrics(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``compute_metrics`` jobs: one read that computes, one short write that stores.

    A result already stored for the current data version (another job, a page, the CLI) is
    not computed again.
    """
    query = ComputeMetricsParams.from_dict(ctx.params).metrics_query()

    def compute(session: Session) -> MetricsResult | None:
        bench = get_benchmark(session, query.benchmark)
        if stored_result(session, bench, query, cache=None) is not None:
            return None
        return compute_result(session, query, draw=metrics_figures, progress=ctx.progress)

    result = ctx.read(compute)
    if result is None:
        return {"benchmark": query.benchmark, "computed": False}
    ctx.commit(lambda session: save_result(session, result))
    return {
        "benchmark": query.benchmark,
        "computed": True,
        "data_version": result.data_version,
        "seconds": round(result.seconds, 3),
    }
