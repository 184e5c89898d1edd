"""What a disagreement row shows beside its id: the start of its prompt (or text) and its slices.

Read for the listed items only, in one query per chunk of ids, after ranking and the limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.disagreements.modes.base import Disagreement
from app.services.disagreements.modes.inputs import ID_CHUNK
from app.services.evidence.payload_fields import PREVIEW_FIELD, SLICE_FIELDS, payload_text, preview
from app.tables import Benchmark, Instance

PREVIEW_LENGTH = 160


def with_previews(
    session: Session, bench: Benchmark, items: Sequence[Disagreement]
) -> list[Disagreement]:
    """``items`` with :attr:`Disagreement.preview` and :attr:`Disagreement.slices` filled in."""
    dialect = session.get_bind().dialect.name
    columns = [
        preview(dialect, PREVIEW_FIELD.get(bench.kind, "prompt"), PREVIEW_LENGTH),
        *(payload_text(dialect, f) for f in SLICE_FIELDS),
    ]
    ids = [d.instance_id for d in items]
    found: dict[int, tuple[str, dict[str, str]]] = {}
    for start in range(0, len(ids), ID_CHUNK):
        q = select(Instance.id, *columns).where(
            Instance.benchmark_id == bench.id, Instance.id.in_(ids[start : start + ID_CHUNK])
        )
        for iid, text, *values in session.execute(q):
            slices = {f: str(v) for f, v in zip(SLICE_FIELDS, values, strict=True) if v is not None}
            found[iid] = (text or "", slices)
    out = []
    for d in items:
        text, slices = found.get(d.instance_id, ("", {}))
        out.append(replace(d, preview=text, slices=slices))
    return out
