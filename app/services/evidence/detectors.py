"""Detector lookup and creation: judges, reward models, probes, baselines and external scorers."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.sql.lookup import ensure_named
from app.tables import Detector

# model: a model's categorical answers (predictions); ranker: a label-error ranker's scores.
DETECTOR_KINDS = ("judge", "reward_model", "probe", "baseline", "external", "model", "ranker")
RANKER_KIND = "ranker"
RANKER_PREFIX = "ranker:"
"""Label-error rankers are detectors ``ranker:<name>`` of kind ``ranker``."""


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
