"""Active review: a queue ordered by a label-error ranker and re-ranked as verdicts arrive.

After every ``rerank_every`` newly reviewed items (or on demand) a ``rerank_queue`` job
retrains the combiner on the verdicts so far and re-orders the items nobody has reviewed yet.
The queue page shows the precision so far (confirmed defects among reviewed items, Wilson
interval), the estimated defects left (the sum of the combiner's probabilities over the
unreviewed items) and the defects found against items reviewed, beside the order plain
consensus would have given the same verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup
from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.detectors import RANKER_PREFIX
from app.services.evidence.resolution import Resolution
from app.services.jobs.kind import enqueue
from app.services.jobs.rerank_queue import RerankQueueParams
from app.services.metrics.rankers import DEFAULT_TRAIN_LABEL, RANKERS
from app.services.metrics.svg_plots import Series, curve_plot
from app.services.metrics.verdicts import verdict_of
from app.services.review import queues
from app.services.review.queue_states import queue_states
from app.stats.proportions import wilson_interval
from app.tables import Detector, Job, QueueItem, ReviewQueue, Score, utcnow

__all__ = [
    "ActiveReview",
    "active_review",
    "apply_ranking",
    "enqueue_if_due",
    "reviewed_verdicts",
    "set_ranking",
]

MAX_RERANK_EVERY = 10_000


def reviewed_verdicts(
    session: Session, queue: ReviewQueue, states: Mapping[int, Resolution] | None = None
) -> list[tuple[int, int]]:
    """``(instance id, verdict)`` of the queue's decided items, in the order they were decided.

    Decided: adjudicated, or ``overlap_k`` agreeing votes; the verdict is 1 when review
    changed the label (on a ``defect`` queue: resolved to 1), else 0. ``states``: the
    queue's resolutions where a page has read them (else folded afresh, as a write needs).
    """
    found: list[tuple[int, int, int]] = []
    states = queues.resolutions(session, queue) if states is None else states
    for iid, res in states.items():
        if not queues.is_done(res, queue.overlap_k):
            continue
        verdict = verdict_of(queue.label_name, DEFAULT_TRAIN_LABEL, res)
        if verdict is None or not res.deciding:
            continue
        found.append((max(e.id for e in res.deciding), iid, verdict))
    return [(iid, v) for _, iid, v in sorted(found)]


def set_ranking(session: Session, queue: ReviewQueue, ranker: str, rerank_every: int) -> None:
    """Set the ranker that orders the queue ('' for none) and how often it re-ranks.

    Raises
    ------
    InvalidInput
        An unknown ranker, or ``rerank_every`` outside 0..10,000.

    """
    if ranker and ranker not in RANKERS:
        raise InvalidInput(f"unknown ranker {ranker!r}; choose from {list(RANKERS)}", "ranker")
    if isinstance(rerank_every, bool) or not 0 <= rerank_every <= MAX_RERANK_EVERY:
        raise InvalidInput(
            f"re-rank every 0 to {MAX_RERANK_EVERY:,} reviewed items", field="rerank_every"
        )
    queue.ranker = ranker or None
    queue.rerank_every = rerank_every


def _pending(session: Session, queue_id: int) -> bool:
    rows = session.scalars(
        select(Job.params).where(
            Job.kind == RerankQueueParams.kind, Job.status.in_(["queued", "running"])
        )
    )
    return any((p or {}).get("queue_id") == queue_id for p in rows)


def enqueue_if_due(session: Session, queue: ReviewQueue, *, force: bool = False) -> Job | None:
    """Queue a re-ranking when ``rerank_every`` items were reviewed since the last (or forced).

    Nothing is queued for a queue with no ranker, or while one re-ranking is pending.
    """
    if not queue.ranker or _pending(session, queue.id):
        return None
    if not force:
        if queue.rerank_every <= 0:
            return None
        done = len(reviewed_verdicts(session, queue))
        if done - int((queue.ranking or {}).get("at", 0)) < queue.rerank_every:
            return None
    return enqueue(session, RerankQueueParams(queue.id))


def apply_ranking(
    session: Session, queue_id: int, scores: Mapping[int, float], info: Mapping[str, Any]
) -> dict[str, Any]:
    """Re-order the unreviewed items by ``scores`` (highest first); reviewed ones stay ahead.

    ``info`` (what the ranker was trained on) is kept in the queue's ``ranking`` state with
    the reviewed count, and, for the combiner, the estimated defects left.
    """
    queue = queues.get_queue(session, queue_id)
    ids = queues.item_ids(session, queue)
    decided = {iid for iid, _ in reviewed_verdicts(session, queue)}
    done = [i for i in ids if i in decided]
    rest = [i for i in ids if i not in decided]
    # Unscored items go last, in their old order (a stable sort).
    rest.sort(key=lambda i: -scores[i] if math.isfinite(scores.get(i, math.nan)) else math.inf)
    session.execute(delete(QueueItem).where(QueueItem.queue_id == queue.id))
    session.execute(
        insert(QueueItem),
        [
            {"queue_id": queue.id, "instance_id": iid, "position": p}
            for p, iid in enumerate(done + rest)
        ],
    )
    left = None
    if info.get("ordered_by", queue.ranker) == "combined":
        left = float(sum(scores[i] for i in rest if math.isfinite(scores.get(i, math.nan))))
    queue.ranking = {
        **dict(info),
        "at": len(done),
        "estimated_left": left,
        "unreviewed": len(rest),
        "reranked_at": utcnow().isoformat(timespec="seconds"),
        "order": rest[: queues.SPREAD_WINDOW],
    }
    return dict(queue.ranking)


@dataclass(frozen=True)
class ActiveReview:
    """What the queue page shows of an active queue."""

    ranker: str
    rerank_every: int
    reviewed: int
    defects: int
    precision: float | None
    low: float | None
    high: float | None
    ranking: dict[str, Any]
    found: list[int]
    consensus_found: list[int]
    curve: Markup | None


def _consensus(session: Session, ids: list[int]) -> dict[int, float]:
    q = (
        select(Score.instance_id, Score.score)
        .join(Detector, Detector.id == Score.detector_id)
        .where(Detector.name == RANKER_PREFIX + "consensus", Score.instance_id.in_(ids))
    )
    return {int(i): float(s) for i, s in session.execute(q).all()}


def active_review(session: Session, queue: ReviewQueue) -> ActiveReview | None:
    """The active-review panel of ``queue`` (None when no ranker orders it)."""
    if not queue.ranker:
        return None
    verdicts = reviewed_verdicts(session, queue, queue_states(session, queue).states)
    n = len(verdicts)
    defects = sum(v for _, v in verdicts)
    low = high = precision = None
    if n:
        precision = defects / n
        low, high = wilson_interval(defects, n)
    found = [sum(v for _, v in verdicts[: i + 1]) for i in range(n)]
    consensus = _consensus(session, [iid for iid, _ in verdicts])
    # Plain consensus order of the same reviewed items (ties: the order they were reviewed).
    by_consensus = sorted(range(n), key=lambda i: -consensus.get(verdicts[i][0], -math.inf))
    consensus_found = [sum(verdicts[j][1] for j in by_consensus[: i + 1]) for i in range(n)]
    curve = None
    if n:
        total = max(defects, 1)
        xs = [0.0] + [(i + 1) / n for i in range(n)]
        curve = curve_plot(
            "found-curve",
            "Defects found against items reviewed",
            [
                Series(f"{queue.ranker} (review order)", xs, [0.0] + [f / total for f in found]),
                Series("plain consensus order", xs, [0.0] + [f / total for f in consensus_found]),
            ],
            x_label=f"items reviewed (of {n})",
            y_label=f"defects found (of {defects})",
            reference=((0.0, 0.0), (1.0, 1.0)),
        )
    return ActiveReview(
        ranker=queue.ranker,
        rerank_every=queue.rerank_every,
        reviewed=n,
        defects=defects,
        precision=precision,
        low=low,
        high=high,
        ranking=dict(queue.ranking or {}),
        found=found,
        consensus_found=consensus_found,
        curve=curve,
    )
