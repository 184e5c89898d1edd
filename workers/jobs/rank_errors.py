"""The ``rank_errors`` job: read the answers, run the label-error rankers, store their scores."""

from __future__ import annotations

from typing import Any

from app.services.jobs.rank_errors import RankErrorsParams
from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers
from workers.runner import JobContext, handles


@handles(RankErrorsParams)
def run_rank_errors(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``rank_errors`` jobs: one short read, the ranking, one short write."""
    params = RankErrorsParams.from_dict(ctx.params)
    ctx.progress(0, 3)
    inputs = ctx.read(
        lambda s: rank_inputs(
            s, params.benchmark, train_label=params.train_label, apply_from=params.apply_from
        )
    )
    ctx.progress(1, 3)
    result = compute_rankers(inputs, params.rankers or None)
    ctx.progress(2, 3)
    return ctx.commit(lambda s: store_rankers(s, inputs, result), done=3, total=3)
