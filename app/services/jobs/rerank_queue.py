"""The ``rerank_queue`` job kind: retrain on the verdicts so far and re-order an active queue.

Queued by the app (:mod:`app.services.review.active_review`) after every N reviewed items of a
queue ordered by a ranker, or from the queue page's "re-rank now" button.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.sql.lookup import get_one
from app.tables import ReviewQueue


@job_kind
@dataclass(frozen=True)
class RerankQueueParams(JobParams):
    """Which queue to re-rank (with its own ranker; the combiner learns from the verdicts)."""

    kind = "rerank_queue"
    title = "Re-rank a review queue"
    startable = False

    queue_id: int

    def check(self, session: Session) -> None:
        """The queue exists and a ranker orders it."""
        queue = get_one(session, ReviewQueue, f"no review queue {self.queue_id}", id=self.queue_id)
        if not queue.ranker:
            raise InvalidInput(f"queue {queue.name!r} is not ordered by a ranker", field="queue")

    def describe(self) -> str:
        """E.g. "Re-rank review queue 3 on the verdicts so far"."""
        return f"Re-rank review queue {self.queue_id} on the verdicts so far"

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The queue page, which shows the new order."""
        return [JobLink(f"Review queue {self.queue_id}", "queue", queue_id=self.queue_id)]
