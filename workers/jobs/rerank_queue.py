"""The ``rerank_queue`` job: rank on the verdicts so far, store the scores, re-order the queue."""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.jobs.rerank_queue import RerankQueueParams
from app.services.metrics.rankers import compute_rankers, rank_inputs, store_rankers
from app.services.review import queues
from app.services.review.active_review import apply_ranking
from app.tables import Benchmark
from workers.runner import JobContext, handles

FALLBACK = "consensus"
"""The ranker that orders an active queue while the combiner has too few verdicts."""


@handles(RerankQueueParams)
def run_rerank_queue(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``rerank_queue`` jobs: one read, the ranking, one write (scores and order)."""
    params = RerankQueueParams.from_dict(ctx.params)

    def read(s: Session) -> tuple[str, str]:
        queue = queues.get_queue(s, params.queue_id)
        return s.get_one(Benchmark, queue.benchmark_id).name, str(queue.ranker)

    bench, ranker = ctx.read(read)
    inputs = ctx.read(lambda s: rank_inputs(s, bench))
    trained = inputs.train[~np.isnan(inputs.train)]
    info: dict[str, Any] = {"verdicts": int(trained.size), "defects": int(trained.sum())}
    try:
        result = compute_rankers(inputs, [ranker])
        used = ranker
    except InvalidInput as exc:
        if ranker != "combined":
            raise
        # Too few verdicts to learn from (or one class only): until there are, the unreviewed
        # items follow plain consensus, and the page says why.
        info["error"] = exc.message
        result = compute_rankers(inputs, [FALLBACK])
        used = FALLBACK
    info["ordered_by"] = used
    values = result.scores[used]
    scores = {int(i): float(v) for i, v in zip(inputs.matrix.instance_ids, values, strict=True)}

    def write(s: Session) -> dict[str, Any]:
        store_rankers(s, inputs, result)
        return apply_ranking(s, params.queue_id, scores, info)

    return ctx.commit(write, done=1, total=1)
