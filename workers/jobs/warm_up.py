"""The ``warm_up`` job: the benchmark's headline metrics computed and kept, unless they are."""

from __future__ import annotations

from typing import Any

from app.services.jobs.warm_up import WarmUpParams
from app.services.metrics.metric_results import compute_unless_stored, save_result
from app.services.metrics.svg_plots import metrics_figures
from workers.runner import JobContext, handles


@handles(WarmUpParams)
def run_warm_up(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``warm_up`` jobs: one read that computes, one short write that keeps."""
    params = WarmUpParams.from_dict(ctx.params)
    query = ctx.read(params.headline)
    result = ctx.read(
        lambda s: compute_unless_stored(s, query, draw=metrics_figures, progress=ctx.progress)
    )
    if result is not None:
        ctx.commit(lambda session: save_result(session, result))
    return {"benchmark": params.benchmark, "label": query.label, "computed": result is not None}
