"""The ``rank_errors`` job: read the answers, run the label-error rankers, store their scores."""

from __future__ import annotations

from typing import Any

from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers
from workers.runner import JobContext


def run_rank_errors(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``rank_errors`` jobs: one short read, the ranking, one short write."""
    params = ctx.params
    ctx.progress(0, 3)
    inputs = ctx.read(
        lambda s: rank_inputs(
            s, params["benchmark"], train_label=params.get("train_label", "defect")
        )
    )
    ctx.progress(1, 3)
    result = compute_rankers(inputs, params.get("rankers") or None)
    ctx.progress(2, 3)
    return ctx.commit(lambda s: store_rankers(s, inputs, result), done=3, total=3)
