"""Activation files: per-batch safetensors shards of [n_items, n_layers, d_model] in the data dir.

The shards are the source of truth for which instances are done; the ActivationSet row's
``instance_ids`` is refreshed from them after every batch, so a resumed job never duplicates rows.
Writers of one folder take turns under an exclusive ``flock`` on the folder (released by the
kernel when a writer is killed), so two processes never number a shard alike or store an
instance twice, and the partial files of killed writers are removed by the next one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy.orm import Session

from app.services.evidence.activation_sets import ensure_activation_set, set_instance_order
from app.tables import ActivationSet

if TYPE_CHECKING:
    from workers.engines.models import ModelInfo

ACTIVATIONS_DIR = "activations"
STORAGE_DTYPES = ("float32", "float16")
_SHARD_GLOB = "shard-*.safetensors"
_PARTIAL_PREFIX = ".shard-"
_PARTIAL_GLOB = f"{_PARTIAL_PREFIX}*.tmp"
_VALUES = "values"
_IDS = "instance_ids"


def relative_set_path(name: str) -> str:
    """``activations/<slug>`` for a set name; names that need escaping get a hash suffix."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-") or "set"
    if slug != name:
        slug = f"{slug[:80]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return f"{ACTIVATIONS_DIR}/{slug}"


@dataclass(frozen=True)
class ActivationArray:
    """An activation set read back: ``values[i]`` belongs to ``instance_ids[i]``.

    ``values`` is ``[n_items, n_layers, d_model]``; column ``k`` is layer ``layers[k]``.
    """

    values: np.ndarray
    instance_ids: list[int]
    layers: list[int]


class ShardFiles:
    """The shard folder of one activation set: append batches, list done ids, read everything.

    Writers take turns under the folder's lock (a set is filled by the job that owns it, but a
    worker that lost its lease may still be finishing a batch); readers may run alongside,
    since a shard only appears, complete, by an atomic rename.
    """

    def __init__(self, folder: Path, *, n_layers: int, d_model: int, dtype: str) -> None:
        if dtype not in STORAGE_DTYPES:
            raise ValueError(f"storage dtype must be one of {STORAGE_DTYPES}, not {dtype!r}")
        self.folder = folder
        self.shape = (n_layers, d_model)
        self.dtype = np.dtype(dtype)

    def shards(self) -> list[Path]:
        """Complete shard files in write order."""
        return sorted(self.folder.glob(_SHARD_GLOB))

    def done_ids(self) -> list[int]:
        """Instance ids already stored, in row order (reads only the id tensors)."""
        from safetensors import safe_open

        ids: list[int] = []
        for shard in self.shards():
            with safe_open(shard, framework="np") as f:
                ids.extend(int(x) for x in f.get_tensor(_IDS))
        return ids

    def append(self, instance_ids: Sequence[int], values: np.ndarray) -> list[int]:
        """Store one batch as a new shard, skipping instances that are already stored.

        Parameters
        ----------
        instance_ids
            ``b`` instance ids, one per row of ``values``.
        values
            ``[b, n_layers, d_model]``, cast to the storage dtype.

        Returns
        -------
        list of int
            The ids actually written (those not stored before), in row order.

        """
        ids = np.asarray(instance_ids, dtype=np.int64)
        if values.shape != (len(ids), *self.shape):
            raise ValueError(f"values {values.shape} do not match {(len(ids), *self.shape)}")
        if len(np.unique(ids)) != len(ids):
            raise ValueError("repeated instance ids in one batch")
        with self._writing():
            self._drop_partials()
            # Read under the lock: another writer's shard may have landed since the caller's.
            keep = ~np.isin(ids, np.asarray(self.done_ids(), dtype=np.int64))
            if keep.any():
                self._write_shard(ids[keep], values[keep])
        return [int(x) for x in ids[keep]]

    def tidy(self) -> int:
        """Remove partial shards left by killed writers; returns how many (when resuming)."""
        if not self.folder.is_dir():
            return 0
        with self._writing():
            return self._drop_partials()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the folder's exclusive lock (the folder is created first).

        A partial file exists only while its writer holds the lock, so any found under it was
        left by a writer that died (:meth:`_drop_partials`).
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _drop_partials(self) -> int:
        partials = list(self.folder.glob(_PARTIAL_GLOB))
        for path in partials:
            path.unlink(missing_ok=True)
        return len(partials)

    def _write_shard(self, ids: np.ndarray, values: np.ndarray) -> None:
        """Publish the next shard (caller holds the lock): ``ids`` [b], ``values`` [b, L, d]."""
        from safetensors.numpy import save_file

        existing = self.shards()
        number = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=_PARTIAL_PREFIX, suffix=".tmp")
        os.close(fd)
        try:
            tensors = {_VALUES: np.ascontiguousarray(values, dtype=self.dtype), _IDS: ids}
            save_file(tensors, tmp, metadata={"format": "appellate-activations-1"})
            # The rename publishes the shard whole: a killed writer leaves only a .tmp file.
            os.replace(tmp, self.folder / f"shard-{number:06d}.safetensors")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def read(self) -> tuple[list[int], np.ndarray]:
        """Every stored row in write order: ids and ``[n_items, n_layers, d_model]`` values."""
        from safetensors.numpy import load_file

        ids: list[int] = []
        parts: list[np.ndarray] = []
        for shard in self.shards():
            tensors = load_file(shard)
            ids.extend(int(x) for x in tensors[_IDS])
            parts.append(tensors[_VALUES])
        values = np.concatenate(parts) if parts else np.empty((0, *self.shape), self.dtype)
        return ids, values


def shard_files(data_dir: Path, activation_set: ActivationSet) -> ShardFiles:
    """The shard folder of ``activation_set`` under ``data_dir``."""
    return ShardFiles(
        Path(data_dir) / activation_set.path,
        n_layers=len(activation_set.layers),
        d_model=activation_set.d_model,
        dtype=activation_set.dtype,
    )


def open_activation_set(
    session: Session,
    name: str,
    *,
    benchmark_id: int,
    model_fingerprint: str,
    layers: Sequence[int],
    position_rule: str,
    d_model: int,
    dtype: str = "float32",
    model_id: int | None = None,
    details: dict[str, object] | None = None,
) -> ActivationSet:
    """Create the set's row (files under ``activations/<name>``) or reopen it to resume.

    Raises
    ------
    app.errors.Conflict
        If the set exists with another spec (see :func:`ensure_activation_set`).

    """
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"storage dtype must be one of {STORAGE_DTYPES}, not {dtype!r}")
    return ensure_activation_set(
        session,
        name,
        benchmark_id=benchmark_id,
        model_fingerprint=model_fingerprint,
        path=relative_set_path(name),
        layers=layers,
        position_rule=position_rule,
        dtype=dtype,
        d_model=d_model,
        model_id=model_id,
        details=dict(details or {}),
    )


def sync_instance_order(session: Session, data_dir: Path, activation_set: ActivationSet) -> int:
    """Copy the row order of the shards into the row; returns the number of stored items.

    Call it in a short transaction after each appended batch, and once when resuming.
    """
    ids = shard_files(data_dir, activation_set).done_ids()
    set_instance_order(session, activation_set, ids)
    return len(ids)


@dataclass(frozen=True)
class FillingSet:
    """An activation set a job appends to batch by batch: its shard files, row id and name."""

    files: ShardFiles
    set_id: int
    name: str
    data_dir: Path

    def sync(self, session: Session) -> int:
        """Record the shards' row order in the set's row (after each appended batch)."""
        row = session.get_one(ActivationSet, self.set_id)
        return sync_instance_order(session, self.data_dir, row)


def open_model_set(
    session: Session,
    data_dir: Path,
    name: str,
    *,
    benchmark_id: int,
    model: ModelInfo,
    model_id: int,
    layers: Sequence[int],
    position_rule: str,
    details: dict[str, object],
) -> FillingSet:
    """Open the set of a loaded model's states (new, or reopened to resume), its order synced.

    Raises
    ------
    app.errors.Conflict
        If the set exists with another spec (see :func:`open_activation_set`).

    """
    aset = open_activation_set(
        session,
        name,
        benchmark_id=benchmark_id,
        model_fingerprint=model.fingerprint,
        layers=layers,
        position_rule=position_rule,
        d_model=model.d_model,
        model_id=model_id,
        details=details,
    )
    files = shard_files(data_dir, aset)
    files.tidy()  # a killed writer's partial shard, if the last run died mid-write
    sync_instance_order(session, data_dir, aset)
    return FillingSet(files, aset.id, aset.name, Path(data_dir))


def read_activation_set(data_dir: Path, activation_set: ActivationSet) -> ActivationArray:
    """The set's values in the row's instance order.

    Rows written to files but not yet recorded in the row (a crash between the two) are left
    out; they are picked up by :func:`sync_instance_order` on resume.

    Raises
    ------
    ValueError
        If an instance recorded in the row has no stored values.

    """
    files = shard_files(data_dir, activation_set)
    stored_ids, values = files.read()
    where = {iid: row for row, iid in enumerate(stored_ids)}
    missing = [iid for iid in activation_set.instance_ids if iid not in where]
    if missing:
        raise ValueError(
            f"activation set {activation_set.name!r}: {len(missing)} recorded instances have "
            f"no stored values (first {missing[0]})"
        )
    rows = np.asarray([where[iid] for iid in activation_set.instance_ids], dtype=np.int64)
    return ActivationArray(
        values=values[rows],
        instance_ids=[int(x) for x in activation_set.instance_ids],
        layers=[int(x) for x in activation_set.layers],
    )
