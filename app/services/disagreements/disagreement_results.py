"""Materialised disagreement lists: each query's ranked list, kept per data version in columns.

A disagreement query (mode, detectors, label set, positive class and the mode's parameters) on
one data version of a benchmark always ranks the same items, so the ranked list is computed
once and kept at two levels: this process's :data:`DISAGREEMENT_CACHE`, then the
``disagreement_results`` table, which every server process and every restart reads. A write to
the benchmark's labels, scores, judgments or instances bumps its ``evidence_version`` (part of
both keys, see :func:`~app.services.evidence.labelled_items.data_key`; the table's ``data_version``
column holds it), so a kept list is never served for data it was not ranked on. Review events
(votes, adjudications) leave it alone: the lists read original labels only, and a review
session would otherwise rank them again after every vote.

The list is kept whole, before any limit, as columns (:class:`RankedList`): ids and numbers in
arrays, each text column packed into one string with end offsets, so a list of a million rows
is a few dozen Python objects, not millions. A page then builds :class:`Disagreement` objects
for its own rows only: work in proportion to the page, not to the benchmark.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.disagreements.modes import DisagreementMode, get_mode
from app.services.disagreements.modes.base import Disagreement, LabelUse, ModeInput, ParamValue
from app.services.evidence.labelled_items import data_key
from app.services.metrics.report import load_labelled
from app.sql.cache import VersionedCache
from app.sql.kept_results import keep_result
from app.tables import Benchmark, DisagreementResult

__all__ = [
    "DISAGREEMENT_CACHE",
    "ListRequest",
    "PackedText",
    "RankedList",
    "Save",
    "compute_ranked",
    "params_key",
    "rank_directly",
    "ranked_list",
    "save_ranked",
    "stored_ranked",
]

DISAGREEMENT_CACHE = VersionedCache(maxsize=16)
"""Process-wide memo of ranked lists. Small: a list costs about 120 bytes a row (a list of every
item of a 1M-item benchmark, 120 MB); an evicted list is read back from the store."""


@dataclass(frozen=True)
class ListRequest:
    """What a ranked list depends on besides the data: the query without its limit.

    ``params`` holds every parameter the mode declares, settled (defaults filled in), in the
    mode's declared order.
    """

    mode: str
    detectors: tuple[str, ...]
    label: str
    positive: str | None
    params: tuple[tuple[str, ParamValue | None], ...]

    @classmethod
    def of(
        cls,
        spec: DisagreementMode,
        detectors: Sequence[str],
        label: str,
        positive: str | None,
        params: Mapping[str, ParamValue | None],
    ) -> ListRequest:
        """The request of a settled query (see :meth:`DisagreementMode.settle`)."""
        return cls(spec.name, tuple(detectors), label, positive, tuple(params.items()))


def params_key(bench: Benchmark, request: ListRequest) -> str:
    """The hash naming ``request`` on ``bench``, whatever its data version.

    A mode's :attr:`~app.services.disagreements.modes.base.DisagreementMode.ranking_revision`
    is part of it: a list kept before the mode's order changed is not found again.

    The benchmark's creation time keeps a new benchmark from reading the lists of a deleted
    one that had its id.
    """
    named: dict[str, object] = {
        "mode": request.mode,
        "detectors": list(request.detectors),
        "label": request.label,
        "positive": request.positive,
        "params": dict(request.params),
        "created_at": str(bench.created_at),
    }
    # Only a revised mode's key changes: the other modes' kept lists stay valid.
    revision = get_mode(request.mode).ranking_revision
    if revision:
        named["revision"] = revision
    text = json.dumps(
        named,
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class PackedText:
    """A column of strings (or ``None``) as one string and each value's end offset.

    Offsets count code points, so a value is one slice of :attr:`text` (CPython strings index
    in constant time).
    """

    text: str
    ends: NDArray[np.int64]
    null: NDArray[np.bool_]

    @classmethod
    def pack(cls, values: Iterable[str | None]) -> PackedText:
        """The column of ``values``."""
        listed = list(values)
        null = np.fromiter((v is None for v in listed), dtype=np.bool_, count=len(listed))
        texts = ["" if v is None else v for v in listed]
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        return cls("".join(texts), np.cumsum(lengths, dtype=np.int64), null)

    def __len__(self) -> int:
        return int(self.ends.size)

    def __getitem__(self, row: int) -> str | None:
        if self.null[row]:
            return None
        start = int(self.ends[row - 1]) if row else 0
        return self.text[start : int(self.ends[row])]


def _floats(values: Iterable[float | None]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Values as an array and the mask of ``None`` (kept apart from NaN, which is a value)."""
    listed = list(values)
    null = np.fromiter((v is None for v in listed), dtype=np.bool_, count=len(listed))
    out = np.fromiter((0.0 if v is None else v for v in listed), np.float64, len(listed))
    return out, null


@dataclass(frozen=True)
class RankedList:
    """A mode's whole ranked list, in rank order, as columns (see the module docstring).

    ``evidence`` holds each item's evidence as JSON text (``None`` where the item has none):
    the API serves evidence as JSON, so it is JSON data, and JSON text round-trips it exactly.
    ``positive`` is the label set's positive class (binary modes), else ``None``.
    """

    positive: str | None
    instance_ids: NDArray[np.int64]
    external_ids: PackedText
    labels: PackedText
    scores: NDArray[np.float64]
    scores_null: NDArray[np.bool_]
    confidences: NDArray[np.float64]
    confidences_null: NDArray[np.bool_]
    reasons: PackedText
    evidence: PackedText

    @classmethod
    def of(cls, found: Sequence[Disagreement], positive: str | None) -> RankedList:
        """The columns of ``found``, a ranked list."""
        scores, scores_null = _floats(d.score for d in found)
        confidences, confidences_null = _floats(d.confidence for d in found)
        return cls(
            positive=positive,
            instance_ids=np.fromiter((d.instance_id for d in found), np.int64, len(found)),
            external_ids=PackedText.pack(d.external_id for d in found),
            labels=PackedText.pack(d.label for d in found),
            scores=scores,
            scores_null=scores_null,
            confidences=confidences,
            confidences_null=confidences_null,
            reasons=PackedText.pack(d.reason for d in found),
            evidence=PackedText.pack(
                None if d.evidence is None else json.dumps(d.evidence, separators=(",", ":"))
                for d in found
            ),
        )

    def __len__(self) -> int:
        return int(self.instance_ids.size)

    def rows(self, limit: int | None = None, start: int = 0) -> list[Disagreement]:
        """Items ``start`` to ``limit`` (the end when ``None``) as :class:`Disagreement` objects.

        ``rank`` is left empty: the order is the list's; previews are not filled in.
        """
        out = []
        for row in range(start, len(self) if limit is None else min(limit, len(self))):
            external_id = self.external_ids[row]
            reason = self.reasons[row]
            evidence = self.evidence[row]
            assert external_id is not None and reason is not None
            out.append(
                Disagreement(
                    int(self.instance_ids[row]),
                    external_id,
                    self.labels[row],
                    None if self.scores_null[row] else float(self.scores[row]),
                    None if self.confidences_null[row] else float(self.confidences[row]),
                    reason,
                    evidence=None if evidence is None else json.loads(evidence),
                )
            )
        return out

    def to_bytes(self) -> bytes:
        """The columns as one compressed ``.npz`` (``positive`` is stored beside it)."""
        arrays: dict[str, NDArray[np.generic]] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, PackedText):
                # surrogatepass: any str the list holds comes back as it was.
                encoded = value.text.encode("utf-8", "surrogatepass")
                arrays[f"{f.name}.text"] = np.frombuffer(encoded, dtype=np.uint8)
                arrays[f"{f.name}.ends"] = value.ends
                arrays[f"{f.name}.null"] = value.null
            elif isinstance(value, np.ndarray):
                arrays[f.name] = value
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, positive: str | None) -> RankedList:
        """The list :meth:`to_bytes` wrote."""
        values: dict[str, object] = {"positive": positive}
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            for f in fields(cls):
                if f.name == "positive":
                    continue
                if f"{f.name}.text" in npz.files:
                    text = npz[f"{f.name}.text"].tobytes().decode("utf-8", "surrogatepass")
                    values[f.name] = PackedText(text, npz[f"{f.name}.ends"], npz[f"{f.name}.null"])
                else:
                    values[f.name] = npz[f.name]
        return cls(**values)  # type: ignore[arg-type]


def rank_directly(
    session: Session, bench: Benchmark, request: ListRequest
) -> tuple[list[Disagreement], str | None]:
    """Every item of ``request`` on ``bench`` in rank order, and the positive class.

    What a request computed before lists were kept: the mode finds every item, then ranks
    them (the positive class is ``None`` unless the mode compares with a binary label set).

    Raises
    ------
    NotFound, InvalidInput
        As :func:`app.services.disagreements.lists.find_disagreements`.

    """
    spec = get_mode(request.mode)
    items = None
    if spec.labels is LabelUse.BINARY:
        items = load_labelled(session, bench, request.label, positive=request.positive)
    inp = ModeInput(
        session, bench, list(request.detectors), request.label, items, dict(request.params)
    )
    return spec.rank(spec.find(inp)), None if items is None else items.target.positive


def compute_ranked(session: Session, bench: Benchmark, request: ListRequest) -> RankedList:
    """:func:`rank_directly`, as columns."""
    return RankedList.of(*rank_directly(session, bench, request))


def stored_ranked(session: Session, bench: Benchmark, request: ListRequest) -> RankedList | None:
    """The list of ``request`` stored for the benchmark's current data version, if any."""
    row = session.execute(
        select(DisagreementResult.positive, DisagreementResult.payload).where(
            DisagreementResult.benchmark_id == bench.id,
            DisagreementResult.params_key == params_key(bench, request),
            DisagreementResult.data_version == bench.evidence_version,
        )
    ).first()
    return None if row is None else RankedList.from_bytes(row.payload, row.positive)


Save = Callable[[Session, Benchmark, ListRequest, RankedList, float], None]
"""Stores a list ranked in a request: :func:`save_ranked` in the reading session, or a web
request's saver, in a short write transaction of its own (a SQLite reader never turns writer)."""


def save_ranked(
    session: Session,
    bench: Benchmark,
    request: ListRequest,
    ranked: RankedList,
    seconds: float = 0.0,
) -> None:
    """Store ``ranked`` for the benchmark's current data version; a stored one stays as it is.

    One ``INSERT ... ON CONFLICT DO NOTHING``: two processes that ranked the same request side
    by side both succeed, and their lists are the same. Every list of the benchmark on an older
    data version goes: no page shows a list of older data.
    """
    keep_result(
        session,
        DisagreementResult,
        {
            "benchmark_id": bench.id,
            "params_key": params_key(bench, request),
            "data_version": bench.evidence_version,
            "mode": request.mode,
            "total": len(ranked),
            "positive": ranked.positive,
            "payload": ranked.to_bytes(),
            "compute_seconds": seconds,
        },
        version="data_version",
        scope=("benchmark_id",),
        unique=("benchmark_id", "params_key", "data_version"),
    )


def _cache_key(session: Session, bench: Benchmark, request: ListRequest) -> Hashable:
    return ("disagreements", *data_key(session, bench, evidence=True), request)


def ranked_list(
    session: Session,
    bench: Benchmark,
    request: ListRequest,
    *,
    save: Save = save_ranked,
    cache: VersionedCache = DISAGREEMENT_CACHE,
) -> RankedList:
    """The ranked list of ``request`` on the benchmark's current data version.

    From ``cache``, else from the store, else ranked here (:func:`compute_ranked`) and handed
    to ``save`` with ``session``. Concurrent callers in one process wait for one computation
    (``cache`` is single-flight); a computation that raises stores nothing.
    """

    def load() -> RankedList:
        found = stored_ranked(session, bench, request)
        if found is not None:
            return found
        started = time.perf_counter()
        ranked = compute_ranked(session, bench, request)
        save(session, bench, request, ranked, time.perf_counter() - started)
        return ranked

    return cache.get_or_compute(_cache_key(session, bench, request), load)
