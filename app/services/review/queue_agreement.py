"""Agreement within a review queue: annotator pairs, all annotators together, and the originals.

Reads the standing votes (an author's latest vote, withdrawals dropped) of the queue's label
set, the same votes resolution counts. Adjudications are a reviewer's decision, not a rating,
and stay out. Intervals resample whole instance groups (``Instance.group_key``): items that
share a question are not independent evidence of agreement.

The queue page asks on every visit; the figures are kept (in this process) per queue and per
state of its votes, so only a new vote makes the next visit compute them again.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from itertools import combinations
from typing import Any

from sqlalchemy.orm import Session

from app.attributes import attributes
from app.services.review.queues import standing_votes
from app.stats.agreement import (
    AgreementEstimate,
    agreement_with_reference,
    bootstrap_alpha,
    bootstrap_kappa_pairs,
)
from app.tables import ReviewQueue

__all__ = ["queue_agreement"]

# Figures of recently viewed queues, by queue and digest of its votes: a vote changes the
# digest, so a kept entry is never stale; the oldest are dropped past this many.
_KEPT_MAX = 64
_kept: OrderedDict[tuple[int, str], dict[str, Any]] = OrderedDict()


def _digest(*parts: Any) -> str:
    """A digest of the votes, groups and originals the figures are computed from."""
    blob = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()


def _estimate(est: AgreementEstimate) -> dict[str, Any]:
    return attributes(est, ("value", "ci", "n_items", "valid_resamples", "reason"))


def queue_agreement(
    session: Session, queue: ReviewQueue, *, resamples: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Inter-annotator agreement of a queue's standing votes, with group-bootstrap intervals.

    With ``n`` items and ``m`` annotators (every author of a standing vote in the queue), the
    votes form a ratings matrix of shape ``(n, m)``, ``None`` where an annotator did not vote.
    From it: Cohen's kappa of each of the ``m (m - 1) / 2`` annotator pairs on the items both
    voted on; Krippendorff's nominal alpha over all ``m`` columns (items with at least two
    votes); and each annotator's column against the ``(n,)`` vector of original values.

    Parameters
    ----------
    session : Session
        An open session; nothing is written.
    queue : ReviewQueue
        The queue; its label set and items define the data.
    resamples : int
        Bootstrap resamples B per statistic (0: point values only).
    seed : int
        Root seed, the same for every statistic: with the same groups, resample ``b`` draws
        the same instance groups for each of them.

    Returns
    -------
    dict
        ``queue``, ``label``, ``items`` (n), ``annotators`` (sorted names), ``resamples``,
        ``seed``, ``level`` (0.95), and

        - ``pairs``: one dict per annotator pair ``(a, b)``, ``a < b``, with ``kappa``,
          ``ci`` (``[low, high]`` or ``None``), ``n_items`` (items both voted on) and
          ``valid_resamples`` and ``reason`` (why ``ci`` is ``None``: too few groups, see
          :func:`app.stats.bootstrap.too_few_groups`; else ``None``);
        - ``alpha``: ``value``, ``ci``, ``n_items`` (items with two or more votes) and
          ``valid_resamples``;
        - ``vs_original``: one dict per annotator with ``n_items`` (items they voted on that
          have an original value), ``n_agree``, ``agreement`` (``n_agree / n_items``),
          ``kappa``, ``ci`` and ``valid_resamples``.

        A statistic undefined on the data (no shared items, a single value throughout) is
        ``None``, as in :mod:`app.stats.agreement`.

    Raises
    ------
    ValueError
        Invalid ``resamples`` or ``seed``.

    """
    ids, groups, votes, originals = standing_votes(session, queue)
    key = (queue.id, _digest(ids, groups, votes, originals, resamples, seed, queue.label_name))
    kept = _kept.get(key)
    if kept is not None:
        _kept.move_to_end(key)
        return {**kept, "queue": queue.name}
    result = _compute(ids, groups, votes, originals, resamples=resamples, seed=seed)
    result = {"queue": queue.name, "label": queue.label_name, **result}
    _kept[key] = result
    while len(_kept) > _KEPT_MAX:
        _kept.popitem(last=False)
    return result


def _compute(
    ids: list[int],
    groups: list[str],
    votes: dict[str, dict[int, str]],
    originals: dict[int, str | None],
    *,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    annotators = sorted(votes)
    columns = {name: [votes[name].get(iid) for iid in ids] for name in annotators}
    reference = [originals[iid] for iid in ids]
    options: dict[str, Any] = {"resamples": resamples, "seed": seed}

    # Every annotator pair and every annotator against the originals, each column coded once;
    # the draws are shared too (the same seed and group count draw the same resamples).
    m = len(annotators)
    wanted = [*combinations(range(m), 2), *((i, m) for i in range(m))]
    estimates = bootstrap_kappa_pairs(
        [*(columns[name] for name in annotators), reference], wanted, groups, **options
    )
    pairs = []
    n_pairs = len(wanted) - m
    for (i, j), estimate in zip(wanted[:n_pairs], estimates[:n_pairs], strict=True):
        est = _estimate(estimate)
        pairs.append({"a": annotators[i], "b": annotators[j], "kappa": est.pop("value"), **est})

    ratings = [[columns[name][i] for name in annotators] for i in range(len(ids))]
    alpha = _estimate(bootstrap_alpha(ratings, groups, **options))

    vs_original = []
    for name, estimate in zip(annotators, estimates[n_pairs:], strict=True):
        counts = agreement_with_reference(columns[name], reference)
        # The bootstrap's point value is the same kappa; only its interval is added here.
        est = _estimate(estimate)
        vs_original.append(
            {
                "annotator": name,
                **counts,
                "ci": est["ci"],
                "valid_resamples": est["valid_resamples"],
                "reason": est["reason"],
            }
        )

    return {
        "items": len(ids),
        "annotators": annotators,
        "resamples": resamples,
        "seed": seed,
        "level": 0.95,
        "pairs": pairs,
        "alpha": alpha,
        "vs_original": vs_original,
    }
