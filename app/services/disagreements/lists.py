"""Confident disagreements: items where detectors contradict a label set, or a judge itself.

The entry points over the registered modes (:mod:`app.services.disagreements.modes`):
:func:`find_disagreements` runs a
:class:`~app.services.disagreements.disagreement_query.DisagreementQuery`, :func:`disagreements`
takes the classic keyword arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.disagreements.disagreement_query import DisagreementQuery, build_query
from app.services.disagreements.disagreement_results import (
    ListRequest,
    Save,
    ranked_list,
    save_ranked,
)
from app.services.disagreements.modes import DEFAULT_MIN_CONFIDENCE, all_modes, get_mode
from app.services.disagreements.modes.base import Disagreement, ParamValue
from app.services.disagreements.modes.previews import with_previews
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labels import benchmark_label

__all__ = [
    "DEFAULT_MIN_CONFIDENCE",
    "MODES",
    "Disagreement",
    "DisagreementList",
    "disagreements",
    "find_disagreements",
]

MODES: tuple[str, ...] = tuple(m.name for m in all_modes())
"""Names of the registered modes, in menu order."""

# Parameters every list's JSON carries (null where its mode does not declare them): the
# output of the modes that predate declared parameters keeps its shape. Other declared
# parameters follow them.
FIXED_PARAMS = ("min_confidence", "k", "judge")


@dataclass(frozen=True)
class DisagreementList:
    """A ranked list and the parameters that produced it; ``total`` counts before ``limit``.

    ``params`` holds the effective value of each parameter the mode declares (defaults
    filled in; ``None`` where unset and without a default). ``items`` are the listed items
    (the first ``listed``: ``total`` cut at the limit), or the page of them that starts at
    position ``start`` (0-based) when one was asked for.
    """

    benchmark: str
    label: str
    mode: str
    detectors: list[str]
    positive: str | None
    params: dict[str, ParamValue | None]
    total: int
    items: list[Disagreement]
    listed: int = 0
    start: int = 0

    @property
    def min_confidence(self) -> float | None:
        """The cut used, if the mode has one."""
        value = self.params.get("min_confidence")
        return None if value is None else float(value)

    @property
    def k(self) -> int | None:
        """The consensus quorum used (consensus mode)."""
        value = self.params.get("k")
        return None if value is None else int(value)

    @property
    def judge(self) -> str | None:
        """The judge compared with (detector-vs-judge mode)."""
        value = self.params.get("judge")
        return None if value is None else str(value)

    @property
    def one_number(self) -> bool:
        """Whether every listed item's score and confidence are the same number.

        Then a page shows one column for both (label-errors mode: both are the ranker's
        score). Unknown values count as equal only to unknown values.
        """
        return all(item.score == item.confidence for item in self.items)

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of ``appellate disagreements --json``."""
        shown: dict[str, Any] = dict.fromkeys(FIXED_PARAMS)
        shown.update(self.params)
        return {
            "benchmark": self.benchmark,
            "label": self.label,
            "mode": self.mode,
            "detectors": self.detectors,
            "positive": self.positive,
            **shown,
            "total": self.total,
            "items": [item.as_dict() for item in self.items],
        }


def find_disagreements(
    session: Session,
    benchmark: str,
    query: DisagreementQuery,
    *,
    save: Save = save_ranked,
    page: tuple[int, int] | None = None,
) -> DisagreementList:
    """The ranked list ``query`` asks for on ``benchmark`` (label set ``reference`` if unset).

    The whole list is ranked once per data version and kept
    (:func:`~app.services.disagreements.disagreement_results.ranked_list`); ``save`` stores a list
    ranked here (by default in ``session``'s transaction). ``page`` ``(start, stop)``: only the
    listed items at those positions (0-based, stop excluded) are returned, with previews read for
    them alone.

    Raises
    ------
    NotFound
        Unknown benchmark, label set, detector or judge.
    InvalidInput
        A number of detectors the mode does not take, a required parameter missing, or what
        the mode refuses (scores that are not probabilities, a non-binary label set, ...).

    """
    spec = get_mode(query.mode)
    names = list(dict.fromkeys(query.detectors))
    spec.detectors.check(spec.name, names)
    params = spec.settle(names, query.values)
    bench = get_benchmark(session, benchmark)
    if not spec.applies_to(bench.kind):
        kinds = " or ".join(spec.benchmark_kinds or ())
        raise InvalidInput(f"{spec.name} mode lists items of {kinds} benchmarks, not {bench.kind}")
    label = benchmark_label(session, bench.id, query.label)
    # The whole ranked list is kept per data version (disagreement_results): a warm request
    # builds objects and previews for its own rows only.
    request = ListRequest.of(spec, names, label, query.positive, params)
    ranked = ranked_list(session, bench, request, save=save)
    listed = len(ranked) if query.limit is None else min(query.limit, len(ranked))
    start, stop = (0, listed) if page is None else (min(page[0], listed), min(page[1], listed))
    return DisagreementList(
        benchmark=bench.name,
        label=label,
        mode=spec.name,
        detectors=names,
        positive=ranked.positive,
        params=params,
        total=len(ranked),
        items=with_previews(session, bench, ranked.rows(stop, start)),
        listed=listed,
        start=start,
    )


def disagreements(
    session: Session,
    benchmark: str,
    detectors: Sequence[str],
    *,
    label: str = "reference",
    mode: str = "threshold",
    min_confidence: float | None = None,
    k: int | None = None,
    positive: str | None = None,
    limit: int | None = None,
    judge: str | None = None,
) -> DisagreementList:
    """Items where detectors confidently contradict a label set, ranked, most confident first.

    Detector scores are read as P(positive class), the class given by
    :func:`app.services.metrics.report.binary_target` (``"A"`` for ``reference``, ``"1"`` for 1/0
    label sets), and are treated as out-of-fold probabilities. A parameter the mode does not
    declare is refused (each mode's class lists its parameters).

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark
        Benchmark name.
    detectors
        Detector names: exactly one except in consensus mode (one or more); in judge-orders
        mode a judge with AB and BA judgments; in detector-vs-judge mode the score detector
        (scores read as P(A better)).
    label
        Label set the items are compared with (judge-orders mode only shows its value).
    mode
        ``threshold``: items whose probability for the other class is ``>= min_confidence``.
        ``cleanlab``: confident-learning label issues (``cleanlab.filter.find_label_issues``,
        ``filter_by="confident_learning"``: per-class thresholds), further cut at
        ``min_confidence`` only when it is given.
        ``consensus``: items where at least ``k`` detectors (default all) have a probability
        for the other class ``>= min_confidence``; ranked by that count, then mean confidence.
        ``judge-orders``: pairs whose AB and BA choices differ (flips), ranked by the smaller
        verbalised confidence (or verdict-logit margin) of the two orders.
        ``detector-vs-judge``: items where the detector's confidence ``max(p, 1 - p)`` is
        ``>= min_confidence`` and its implied choice (A if ``p >= 0.5``, else B) differs from
        ``judge``'s AB-order choice; an ``invalid`` AB choice is skipped, a ``tie`` counts as a
        disagreement. Ranked by the detector's confidence.
    min_confidence
        Cut on the probability of the other class, in [0, 1]; default
        ``DEFAULT_MIN_CONFIDENCE`` for threshold, consensus and detector-vs-judge.
    k
        Consensus quorum, 1 <= k <= len(detectors).
    positive
        Explicit positive class of the label set.
    limit
        Keep the first ``limit`` items (``total`` still counts all).
    judge
        Judge name (a detector with judgments); detector-vs-judge mode only, and required there.

    Returns
    -------
    DisagreementList

    Raises
    ------
    NotFound
        Unknown benchmark, label set, detector or judge.
    InvalidInput
        Unknown mode, wrong number of detectors, bad cut, quorum or limit, scores that are not
        probabilities, a non-binary label set, a parameter the mode does not take (a judge
        outside detector-vs-judge mode, k outside consensus mode), a judge missing or without
        AB-order judgments.

    """
    query = build_query(
        mode,
        detectors,
        label=label,
        positive=positive,
        limit=limit,
        values={"min_confidence": min_confidence, "k": k, "judge": judge},
    )
    return find_disagreements(session, benchmark, query)
