"""Probe detectors and their frozen artifacts (coefficients, standardisation, layer, C, provenance).

A probe is a detector of kind ``probe``. Its details say how it was fitted (data, folds, chosen
hyperparameters, validation curves); a frozen probe also names an artifact file under
``<data dir>/probes/`` holding what is needed to apply it elsewhere with no fitting.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import NotFound
from app.files import write_text_atomically
from app.services.evidence.detectors import ensure_detector
from app.sql.lookup import get_one
from app.tables import Detector

PROBES_DIR = "probes"


def artifact_path(name: str) -> str:
    """``probes/<slug>.json`` for a probe name (relative to the data directory)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-") or "probe"
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{PROBES_DIR}/{slug[:80]}-{digest}.json"


def put_detector(
    session: Session, name: str, kind: str, details: dict[str, Any], description: str = ""
) -> Detector:
    """Create or update a fitted detector; a refit replaces its details (history is in jobs)."""
    detector = ensure_detector(session, name, kind, description=description)
    detector.details = details
    if description:
        detector.description = description
    session.flush()
    return detector


def save_probe(
    session: Session,
    data_dir: Path,
    name: str,
    artifact: dict[str, Any],
    details: dict[str, Any],
    description: str = "",
) -> Detector:
    """Write the artifact file (atomically) and record the frozen probe as a detector."""
    rel = artifact_path(name)
    write_text_atomically(data_dir / rel, json.dumps(artifact))
    return put_detector(session, name, "probe", {**details, "artifact": rel}, description)


def load_probe(session: Session, data_dir: Path, name: str) -> tuple[Detector, dict[str, Any]]:
    """A frozen probe's detector row and artifact.

    Raises
    ------
    NotFound
        If there is no probe of that name, or it has no artifact (a cross-validated probe).

    """
    detector = get_one(session, Detector, f"no probe named {name!r}", name=name, kind="probe")
    rel = (detector.details or {}).get("artifact")
    if not rel:
        raise NotFound(f"probe {name!r} has no frozen artifact (it holds cross-validated scores)")
    path = data_dir / rel
    if not path.exists():
        raise NotFound(f"probe {name!r}: artifact file {rel} is missing from the data directory")
    return detector, json.loads(path.read_text(encoding="utf-8"))


def list_probes(session: Session) -> list[Detector]:
    """Every probe and baseline detector, by name."""
    q = select(Detector).where(Detector.kind.in_(["probe", "baseline"])).order_by(Detector.name)
    return list(session.scalars(q))
