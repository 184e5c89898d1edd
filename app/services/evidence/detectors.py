"""Detector lookup and creation: judges, reward models, probes, baselines and external scorers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from app.sql.bulk import one_of
from app.sql.lookup import ensure_named
from app.tables import Detector

# model: a model's categorical answers (predictions); ranker: a label-error ranker's scores;
# critic: a model's probability that an item's labelled answer or question is wrong.
DETECTOR_KINDS = (
    "judge", "reward_model", "probe", "baseline", "external", "model", "ranker", "critic",
)  # fmt: skip
RANKER_KIND = "ranker"
RANKER_PREFIX = "ranker:"
"""Label-error rankers are detectors ``ranker:<name>`` of kind ``ranker``."""
CRITIC_KIND = "critic"
CRITIC_PREFIX = "critic:"
"""LLM critics are detectors ``critic:<model>`` (by default) of kind ``critic``."""
REVIEW_RANKING_KINDS = frozenset({RANKER_KIND, CRITIC_KIND})
"""Kinds whose scores rank items for review (the top-k metrics apply to them)."""


def ensure_detector(
    session: Session,
    name: str,
    kind: str,
    *,
    description: str = "",
    details: dict[str, Any] | None = None,
) -> Detector:
    """The detector called ``name``, created with ``kind`` and ``details`` if it is new.

    An existing detector is returned as it is (its kind and details are not touched), so that
    scores from another source can be attached to, say, a reward model imported earlier.

    Raises
    ------
    ValueError
        If ``kind`` is not one of ``DETECTOR_KINDS``.

    """
    if kind not in DETECTOR_KINDS:
        raise ValueError(f"unknown detector kind {kind!r}")
    new = {"kind": kind, "description": description, "details": details or {}}
    return ensure_named(session, Detector, name, {}, new)


def ensure_detectors(
    session: Session, wanted: Mapping[str, tuple[str, dict[str, Any]]]
) -> dict[str, int]:
    """Ids of the detectors named in ``wanted`` (``{name: (kind, details)}``), new ones created.

    One read of those that exist and one batched insert of the rest (not one statement per
    detector: an import with many model columns made thousands). Existing detectors keep
    their kind and details, as with :func:`ensure_detector`.

    Raises
    ------
    ValueError
        If a kind is not one of ``DETECTOR_KINDS``.

    """
    for kind, _details in wanted.values():
        if kind not in DETECTOR_KINDS:
            raise ValueError(f"unknown detector kind {kind!r}")
    names = list(wanted)
    ids: dict[str, int] = {}
    if names:
        found = select(Detector.name, Detector.id).where(one_of(session, Detector.name, names))
        ids = {name: int(did) for name, did in session.execute(found)}
    new = [
        {"name": name, "kind": kind, "description": "", "details": details}
        for name, (kind, details) in wanted.items()
        if name not in ids
    ]
    if new:
        # An ORM bulk INSERT: batched statements (insertmanyvalues) with RETURNING.
        made = session.execute(insert(Detector).returning(Detector.name, Detector.id), new)
        ids.update({name: int(did) for name, did in made})
    return ids
