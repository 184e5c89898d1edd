"""Arrays derived from a benchmark's evidence, kept in the store per evidence version.

A cold read of a big benchmark goes row by row: the label column of a label set (0.6 s at
100,000 items on SQLite), a detector's scores (0.3 s), every instance id of a table sorted by a
score (3.4-13 s at a million on PostgreSQL). What a page needs whole is read once, after the
import that changed it (the ``warm_up`` job), and kept here as one ``.npz`` per name: the next
reader, in any process and after any restart, loads arrays instead of rows.

Each row is named by the benchmark's ``evidence_version``: whatever reads only evidence and
original labels (these do) is valid until a write bumps it, and a kept row of an older version
is never read (the lookup asks for the current one) and goes when a newer one is kept.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.sql.kept_results import keep_result
from app.tables import Benchmark, KeptArrays

__all__ = [
    "Arrays",
    "coded_texts",
    "decoded_texts",
    "keep_arrays",
    "kept_arrays",
    "kept_name",
    "text_array",
    "texts",
]

Arrays = dict[str, NDArray[Any]]
"""Named arrays of one kept row."""


def kept_name(kind: str, *parts: Any) -> str:
    """The name of a kept row: ``kind`` and a hash of the JSON of ``parts``.

    Hashed so that label set, detector and filter names of any length and any characters fit
    the column; ``kind`` stays readable for whoever looks at the table.
    """
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return f"{kind}:{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()}"


def text_array(values: Sequence[str | None]) -> NDArray[np.uint8]:
    """A column of strings (or ``None``) as the bytes of its JSON list.

    JSON keeps every ``str`` (lone surrogates as escapes) and ``None``; ``json.loads`` of
    100,000 short strings takes milliseconds, where slicing them out of one text takes tens.
    """
    return np.frombuffer(json.dumps(list(values)).encode("ascii"), dtype=np.uint8)


def texts(array: NDArray[np.uint8]) -> list[Any]:
    """The column :func:`text_array` wrote."""
    return list(json.loads(array.tobytes()))


def coded_texts(values: Sequence[str | None]) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
    """A column with few distinct strings as codes and the JSON of its vocabulary.

    A label set has a handful of values and a benchmark's groups a fraction of its items:
    decoding codes is an index into the vocabulary, not a parse of every row.
    """
    vocabulary: dict[str | None, int] = {}
    codes = np.fromiter(
        (vocabulary.setdefault(v, len(vocabulary)) for v in values),
        dtype=np.int64,
        count=len(values),
    )
    return codes, text_array(list(vocabulary))


def decoded_texts(codes: NDArray[np.int64], vocabulary: NDArray[np.uint8]) -> list[Any]:
    """The column :func:`coded_texts` wrote."""
    return list(np.array(texts(vocabulary), dtype=object)[codes].tolist()) if codes.size else []


def _to_bytes(arrays: Mapping[str, NDArray[Any]]) -> bytes:
    buf = io.BytesIO()
    # Not compressed: ids and scores compress little, and loading must be as fast as it can.
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def _from_bytes(data: bytes) -> Arrays:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def kept_arrays(session: Session, bench: Benchmark, name: str) -> Arrays | None:
    """The arrays kept as ``name`` for ``bench``'s current evidence version, if any."""
    if session.get_bind().dialect.name == "postgresql":
        payload = _binary_payload(session, bench, name)
    else:
        payload = session.scalar(
            select(KeptArrays.payload).where(
                KeptArrays.benchmark_id == bench.id,
                KeptArrays.name == name,
                KeptArrays.evidence_version == bench.evidence_version,
            )
        )
    return None if payload is None else _from_bytes(payload)


def _binary_payload(session: Session, bench: Benchmark, name: str) -> bytes | None:
    """The payload read in PostgreSQL's binary format, on the session's own connection.

    The text format sends a ``bytea`` as hex that psycopg then decodes: 45-100 ms for the 3.6 MB
    of a 100,000-item label set, against 10 ms for the bytes as they are.
    """
    driver = session.connection().connection.driver_connection
    assert driver is not None
    with driver.cursor(binary=True) as cursor:
        cursor.execute(
            "SELECT payload FROM kept_arrays"
            " WHERE benchmark_id = %s AND name = %s AND evidence_version = %s",
            (bench.id, name, bench.evidence_version),
        )
        row = cursor.fetchone()
    return None if row is None else bytes(row[0])


def keep_arrays(session: Session, bench: Benchmark, name: str, arrays: Mapping[str, Any]) -> None:
    """Keep ``arrays`` as ``name``, computed on ``bench`` as loaded (its evidence version).

    ``bench`` may come from an earlier read transaction: arrays of a version since superseded
    are never read. Every kept row of the benchmark on an older version goes (stale whatever
    its name); a row already kept under this name and version stays (it holds the same).
    """
    keep_result(
        session,
        KeptArrays,
        {
            "benchmark_id": bench.id,
            "name": name,
            "evidence_version": bench.evidence_version,
            "payload": _to_bytes(arrays),
        },
        version="evidence_version",
        scope=("benchmark_id",),
        unique=("benchmark_id", "name", "evidence_version"),
    )
